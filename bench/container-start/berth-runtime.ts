import { join } from "node:path";
import { performance } from "node:perf_hooks";
import {
  type ContainerEvent,
  ContainerRuntime,
  crunRefusal,
  type LogLine,
  type OciRuntimeName,
} from "../../agent/runtime/index.ts";
import { removeCgroup } from "../lib/cgroups.ts";
import { benchTempDir } from "../lib/fs.ts";
import { type BenchContext, type Contender, READY_LINE, type StartSample, withTimeout } from "./contender.ts";

interface Waiters {
  ready: PromiseWithResolversCompat<number>;
  exit: PromiseWithResolversCompat<ContainerEvent>;
  startAt?: number;
}

interface PromiseWithResolversCompat<T> {
  promise: Promise<T>;
  resolve: (v: T) => void;
}

function deferred<T>(): PromiseWithResolversCompat<T> {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/**
 * berth's agent runtime (agent/runtime ContainerRuntime) as the agent uses
 * it: full OCI spec (seccomp, caps, masked paths, cgroup limits), overlay on
 * the image dir, the sh waiter around `runc run --keep`, file-backed logs
 * delivered through onLog. No network namespace is joined (the spec then
 * asks runc for a fresh empty one, like the other contenders).
 */
export class BerthRuntime implements Contender {
  readonly name: string;
  readonly method = {
    running:
      "ContainerRuntime.run() call until it resolves (it returns once runc's init.pid exists; the `start` event fires in the same tick)",
    print: "same run() call until onLog delivers the stdout line `ready` (log file followed via inotify)",
    notes:
      "cpu 1 core, memory 512 MiB; timing includes config.json/meta.json writes, the container's disk (a 50 GiB sparse ext4 image, loop-mounted; two kept ready ahead of demand, as the agent does) and overlay mounts, waiter spawn",
  };
  private runtime?: ContainerRuntime;
  private readonly waiters = new Map<string, Waiters>();

  /**
   * diskBytes 0: the ablation row without a disk quota (the upper dir on the
   * host's disk). ociRuntime: the rows for crun and runsc (gVisor) beside runc.
   */
  constructor(
    private readonly ctx: BenchContext,
    private readonly diskBytes?: number,
    private readonly ociRuntime: OciRuntimeName = "runc",
  ) {
    this.name =
      diskBytes === 0
        ? "berth runtime, no disk quota"
        : ociRuntime === "runc"
          ? "berth runtime"
          : `berth runtime, ${ociRuntime === "runsc" ? "runsc (gVisor)" : ociRuntime}`;
  }

  async setup(): Promise<void> {
    const dir = benchTempDir(this.ctx.cleanup, "berth-bench-berth-");
    // Own cgroup parent: nothing of a real agent on this host is touched.
    const cgroupParent = `/berth-bench-berth-${this.ctx.runId}${this.diskBytes === 0 ? "-nodisk" : ""}`;
    const runtime = new ContainerRuntime({
      root: join(dir, "containers"),
      cgroupParent,
      // As the agent runs it: two disks made ahead of demand.
      ...(this.diskBytes !== undefined ? { diskBytes: this.diskBytes } : { diskPoolSize: 2 }),
      onLog: (l: LogLine) => this.onLog(l),
      onEvent: (e: ContainerEvent) => this.onEvent(e),
    });
    this.runtime = runtime;
    if (this.ociRuntime === "crun") {
      // The refusal the agent gives, as this row's reason.
      const why = crunRefusal(runtime.cgroups);
      if (why) throw new Error(why);
    }
    this.ctx.cleanup.add("berth runtime: delete containers", async () => {
      for (const c of runtime.list()) await runtime.delete(c.id);
      runtime.close();
      await runtime.drainDisks();
      removeCgroup(cgroupParent);
    });
  }

  async measure(i: number): Promise<StartSample> {
    const rt = this.runtime!;
    const id = `${this.ctx.runId}-berth-${i}`;
    const w: Waiters = { ready: deferred(), exit: deferred() };
    this.waiters.set(id, w);
    const t0 = performance.now();
    try {
      await withTimeout(
        rt.run({
          id,
          image: { rootfs: this.ctx.rootfs },
          args: this.ctx.args,
          cpu: 1,
          memoryBytes: 512 * 1024 * 1024,
          runtime: this.ociRuntime,
        }),
        30_000,
        "ContainerRuntime.run",
      );
      const runningAt = performance.now();
      const printAt = await withTimeout(w.ready.promise, 30_000, `onLog ${READY_LINE}`);
      const exit = await withTimeout(w.exit.promise, 30_000, "the exit event");
      if (exit.type === "exit" && exit.exitCode !== 0) {
        throw new Error(`container exited ${exit.exitCode}: ${exit.stderrTail}`);
      }
      return {
        runningMs: runningAt - t0,
        printMs: printAt - t0,
        phases: w.startAt === undefined ? {} : { startEvent: w.startAt - t0 },
      };
    } finally {
      this.waiters.delete(id);
      if (rt.get(id)) await rt.delete(id);
    }
  }

  private onLog(l: LogLine): void {
    if (l.stream === "stdout" && l.line === READY_LINE)
      this.waiters.get(l.containerId)?.ready.resolve(performance.now());
  }

  private onEvent(e: ContainerEvent): void {
    const w = this.waiters.get(e.containerId);
    if (!w) return;
    if (e.type === "start") w.startAt = performance.now();
    else w.exit.resolve(e);
  }
}
