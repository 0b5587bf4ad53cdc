// Which GPUs may take new work. A GPU is drained when the kernel logs a fatal
// XID for it, when nvidia-smi cannot reach it or no longer lists it (fallen
// off the bus), or when its values say it must be reset. It returns when a
// later telemetry read shows it answering normally; after a fatal XID only
// once `holdMs` has passed too, since the driver may answer for a GPU whose
// state is already corrupt until it is reset.

import { describeError } from "../../shared/errors.ts";
import type { DrainedGpu } from "../../shared/fleet.ts";
import type { GpuTelemetry } from "../../shared/subjects.ts";
import { normalizePciBusId, type TelemetryResult, type TelemetryTable } from "./gpu-telemetry.ts";
import { describeXid, FATAL_XIDS, type XidEvent } from "./xid.ts";

export const DEFAULT_XID_HOLD_MS = 5 * 60_000;

export interface GpuHealthOptions {
  /** After a fatal XID, how long the GPU stays drained even if it answers. @default 5 minutes */
  holdMs?: number;
  /** @default FATAL_XIDS */
  fatalXids?: ReadonlySet<number>;
  clock?: () => number;
}

interface KnownGpu {
  index: number;
  uuid: string;
  model: string;
}

interface Drain extends DrainedGpu {
  /** Not restored before this time (ms since epoch). */
  holdUntil: number;
}

/** The health bookkeeping, fed one telemetry table and the XIDs since the last one per round. */
export class GpuHealth {
  private readonly holdMs: number;
  private readonly fatal: ReadonlySet<number>;
  private readonly clock: () => number;
  private readonly byBus = new Map<string, KnownGpu>();
  private readonly drains = new Map<string, Drain>();
  private readonly lastXid = new Map<string, { code: number; at: number }>();

  constructor(o: GpuHealthOptions = {}) {
    this.holdMs = o.holdMs ?? DEFAULT_XID_HOLD_MS;
    this.fatal = o.fatalXids ?? FATAL_XIDS;
    this.clock = o.clock ?? Date.now;
  }

  /** Takes one round; returns whether the set of drained GPUs changed. */
  observe(table: TelemetryTable, xids: readonly XidEvent[]): boolean {
    const before = this.key();
    const now = this.clock();
    const listed = new Set<string>();
    for (const g of table.gpus) {
      const bus = normalizePciBusId(g.pciBusId);
      if (bus) this.byBus.set(bus, { index: g.index, uuid: g.uuid, model: g.model });
      listed.add(g.uuid);
    }
    for (const x of xids) {
      const gpu = this.byBus.get(x.pciBusId);
      if (!gpu) continue; // not one of the GPUs nvidia-smi has shown this agent
      const prev = this.lastXid.get(gpu.uuid);
      if (!prev || prev.at <= x.at) this.lastXid.set(gpu.uuid, { code: x.code, at: x.at });
      if (this.fatal.has(x.code)) {
        this.drain(gpu, `${describeXid(x.code)} logged by the driver`, x.at, x.at + this.holdMs, x.code);
      }
    }
    const unreachable = new Set<string>();
    for (const u of table.unreachable) {
      const bus = normalizePciBusId(u.pciBusId);
      const gpu = bus ? this.byBus.get(bus) : undefined;
      if (!gpu) continue;
      unreachable.add(gpu.uuid);
      this.drain(gpu, `the driver cannot reach it: ${u.message}`, now, now);
    }
    for (const gpu of this.byBus.values()) {
      if (!listed.has(gpu.uuid) && !unreachable.has(gpu.uuid)) {
        this.drain(gpu, "nvidia-smi no longer lists it (fallen off the bus?)", now, now);
      }
    }
    for (const g of table.gpus) {
      if (g.problem) this.drain(g, g.problem, now, now);
      else {
        const d = this.drains.get(g.uuid);
        if (d && now >= d.holdUntil) this.drains.delete(g.uuid);
      }
    }
    return this.key() !== before;
  }

  drained(): DrainedGpu[] {
    return [...this.drains.values()].sort((a, b) => a.index - b.index).map(({ holdUntil: _, ...d }) => d);
  }

  /** The drained set as a map by uuid (the watcher's view). */
  drainedByUuid(): ReadonlyMap<string, DrainedGpu> {
    return new Map(this.drained().map((d) => [d.uuid, d]));
  }

  /** The rows with what health knows of each: its last XID and its drain. */
  annotate(gpus: readonly GpuTelemetry[]): GpuTelemetry[] {
    return gpus.map((g) => {
      const xid = this.lastXid.get(g.uuid);
      const d = this.drains.get(g.uuid);
      return {
        ...g,
        ...(xid ? { lastXid: xid } : {}),
        ...(d ? { drained: { reason: d.reason, since: d.since } } : {}),
      };
    });
  }

  private drain(gpu: KnownGpu, reason: string, since: number, holdUntil: number, xid?: number): void {
    const d = this.drains.get(gpu.uuid);
    if (d) {
      // The first cause stays the reason; a later one can only lengthen the hold.
      d.holdUntil = Math.max(d.holdUntil, holdUntil);
      return;
    }
    this.drains.set(gpu.uuid, {
      index: gpu.index,
      uuid: gpu.uuid,
      model: gpu.model,
      reason,
      since,
      holdUntil,
      ...(xid !== undefined ? { xid } : {}),
    });
  }

  private key(): string {
    return [...this.drains.keys()].sort().join(",");
  }
}

export interface GpuMonitorOptions {
  telemetry: { read(): Promise<TelemetryResult | "absent"> };
  /** Absent: XIDs are not watched (health then rests on telemetry alone). */
  xids?: { read(): XidEvent[] };
  health?: GpuHealth;
  /** Called with the drained GPUs whenever the set changes. */
  onChange?: (drained: DrainedGpu[]) => void;
  warn?: (message: string) => void;
}

/** One telemetry read and one XID read per call, fed to the health bookkeeping. */
export class GpuMonitor {
  readonly health: GpuHealth;
  private xids?: { read(): XidEvent[] };

  constructor(private readonly o: GpuMonitorOptions) {
    this.health = o.health ?? new GpuHealth();
    this.xids = o.xids;
  }

  async read(): Promise<TelemetryResult | "absent"> {
    const r = await this.o.telemetry.read();
    if (r === "absent" || !r.ok) return r;
    let xids: XidEvent[] = [];
    if (this.xids) {
      try {
        xids = this.xids.read();
      } catch (e) {
        this.o.warn?.(`XID errors are not watched: cannot read the kernel log: ${describeError(e)}`);
        this.xids = undefined;
      }
    }
    if (this.health.observe(r, xids)) this.o.onChange?.(this.health.drained());
    return { ...r, gpus: this.health.annotate(r.gpus) };
  }

  drained(): DrainedGpu[] {
    return this.health.drained();
  }
}
