// Re-probes the GPUs on a timer so that a driver installed, upgraded or broken
// while the agent runs shows up in its next heartbeat without a restart.

import { isDeepStrictEqual } from "node:util";
import { invalid } from "../../shared/errors.ts";
import type { DrainedGpu, GpuReport } from "../../shared/fleet.ts";
import type { GpuProbe } from "./gpu-probe.ts";

export interface GpuWatcherOptions {
  /** The probe to repeat. */
  probe: GpuProbe;
  /** Time between the end of one probe and the start of the next. @default 60_000 */
  intervalMs?: number;
  /** Called with the new report whenever it differs from the last one (the first report included). */
  onChange?: (report: GpuReport, previous: GpuReport | undefined) => void;
  /** Called when a probe throws; the watcher keeps its last report and goes on. @default ignore */
  onError?: (error: unknown) => void;
  /** GPUs health checks drained (gpu-health.ts): left out of the report's devices, listed in `drained`. */
  drained?: () => readonly DrainedGpu[];
}

export interface ResolvedGpuWatcherOptions {
  probe: GpuProbe;
  intervalMs: number;
  onChange: (report: GpuReport, previous: GpuReport | undefined) => void;
  onError: (error: unknown) => void;
  drained: () => readonly DrainedGpu[];
}

export function resolveGpuWatcherOptions(opts: GpuWatcherOptions): ResolvedGpuWatcherOptions {
  const intervalMs = opts.intervalMs ?? 60_000;
  if (!Number.isInteger(intervalMs) || intervalMs <= 0) {
    throw invalid(`gpu watcher: intervalMs must be a positive integer, got ${intervalMs}`);
  }
  return {
    probe: opts.probe,
    intervalMs,
    onChange: opts.onChange ?? (() => {}),
    onError: opts.onError ?? (() => {}),
    drained: opts.drained ?? (() => []),
  };
}

/**
 * Holds the latest GPU report. It is itself a GpuProbe whose probe() answers
 * from that report, so heartbeats can read it without spawning nvidia-smi.
 */
export class GpuWatcher implements GpuProbe {
  readonly options: ResolvedGpuWatcherOptions;
  private last?: GpuReport;
  /** The probe's own answer, before drained GPUs are taken out. */
  private probed?: GpuReport;
  private timer?: NodeJS.Timeout;
  private inFlight?: Promise<GpuReport | undefined>;
  private running = false;

  constructor(opts: GpuWatcherOptions) {
    this.options = resolveGpuWatcherOptions(opts);
  }

  get current(): GpuReport | undefined {
    return this.last;
  }

  /** Probes once, then keeps probing every intervalMs until stop(). */
  async start(): Promise<GpuReport | undefined> {
    if (this.running) return this.last;
    this.running = true;
    const first = await this.refresh();
    this.schedule();
    return first;
  }

  /** Probes now (joining a probe already under way) and reports a change if there is one. */
  refresh(): Promise<GpuReport | undefined> {
    if (!this.inFlight) {
      this.inFlight = this.probeOnce().finally(() => {
        this.inFlight = undefined;
      });
    }
    return this.inFlight;
  }

  async probe(): Promise<GpuReport> {
    if (this.last) return this.last;
    const r = await this.refresh();
    if (!r)
      return {
        available: false,
        reason: "the GPU probe failed; see the agent log",
        toolkit: false,
        devices: [],
      };
    return r;
  }

  /** Ends the timer and waits for a probe under way; no callback fires after it resolves. */
  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.inFlight;
  }

  private schedule(): void {
    if (!this.running) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh().then(() => this.schedule());
    }, this.options.intervalMs);
    // The agent's servers keep the process alive; this timer alone should not.
    this.timer.unref();
  }

  /** Applies the drained set again to the last probe (health changed between probes). */
  reassess(): GpuReport | undefined {
    if (this.probed) this.publish(this.probed);
    return this.last;
  }

  private async probeOnce(): Promise<GpuReport | undefined> {
    let report: GpuReport;
    try {
      report = await this.options.probe.probe();
    } catch (e) {
      this.options.onError(e);
      return this.last;
    }
    this.probed = report;
    return this.publish(report);
  }

  private publish(probed: GpuReport): GpuReport {
    let report = probed;
    try {
      report = withoutDrained(probed, this.options.drained());
    } catch (e) {
      this.options.onError(e);
    }
    const previous = this.last;
    this.last = report;
    if (!isDeepStrictEqual(report, previous)) {
      try {
        this.options.onChange(report, previous);
      } catch (e) {
        this.options.onError(e);
      }
    }
    return report;
  }
}

/**
 * The report with drained GPUs' devices (a drained GPU's MIG slices too) out
 * of `devices` and the drained GPUs in `drained`. An unavailable report stays
 * as it is: its reason already says why nothing is offered.
 */
export function withoutDrained(report: GpuReport, drained: readonly DrainedGpu[]): GpuReport {
  if (!report.available || drained.length === 0) return report;
  const out = new Set(drained.map((d) => d.uuid));
  const devices = report.devices.filter((d) => !out.has(d.uuid) && !(d.mig && out.has(d.mig.parentUuid)));
  return { ...report, devices, drained: [...drained] };
}
