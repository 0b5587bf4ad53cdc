import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { ContainerHost, type HostEvent } from "../../agent/host/index.ts";
import { ImageStore } from "../../agent/images/index.ts";
import { cleanupNetworkByPrefix, Network } from "../../agent/network/index.ts";
import type { LogEntry } from "../../api/index.ts";
import { ContainerRuntime } from "../../agent/runtime/index.ts";
import { startTestRegistry } from "../../test/helpers/registry.ts";
import { pushTestImage } from "../../test/helpers/test-image.ts";
import { testNames } from "../../test/network/helpers.ts";
import { removeCgroup } from "../lib/cgroups.ts";
import { benchTempDir } from "../lib/fs.ts";
import { mustExec } from "../lib/proc.ts";
import { type BenchContext, type Contender, READY_LINE, type StartSample, withTimeout } from "./contender.ts";

/**
 * Where the host gets the image from on every start: "import" = a name
 * imported into the ImageStore (local by definition, no registry call);
 * "registry" = a tag already pulled from a local registry (ImageStore.pull
 * re-resolves the tag with a manifest inspect on each start).
 */
export type HostImageSource = "import" | "registry";

interface Waiter {
  ready: Promise<number>;
  exit: Promise<Extract<HostEvent, { type: "exit" }>>;
  resolveReady: (at: number) => void;
  resolveExit: (e: Extract<HostEvent, { type: "exit" }>) => void;
}

/**
 * The whole agent path through agent/host's ContainerHost: validation, CPU
 * and memory reservation, ImageStore.pull (cache hit), a network namespace
 * from the Network's pool with veth, addresses, nft rules and resolv.conf,
 * the hosts file and record, then the runtime. Network and image store have
 * names and dirs of their own and are destroyed at the end.
 */
export class BerthHost implements Contender {
  readonly name: string;
  readonly method = {
    running: "ContainerHost.runContainer() call until it resolves (it returns after ContainerRuntime.run())",
    print: "same call until the host's onLog delivers the stdout line `ready`",
    notes: "",
  };
  private host?: ContainerHost;
  private net?: Network;
  private imageRef = "";
  /** Time spent in each dependency call during the current measure(): where the host's time goes. */
  private phases: Record<string, number> = {};
  private readonly waiters = new Map<string, Waiter>();

  /** `userNamespace` false: the request opts out of the user namespace (what it costs is the difference). */
  constructor(
    private readonly ctx: BenchContext,
    readonly source: HostImageSource = "import",
    readonly userNamespace = true,
  ) {
    this.name =
      source === "import"
        ? "berth agent (ContainerHost: imported image + netns + runtime)"
        : "berth agent (ContainerHost: registry tag, cached + netns + runtime)";
    if (!userNamespace) this.name = this.name.replace("runtime)", "runtime, no user namespace)");
    this.method.notes = `cpu 1, 512 MiB, egress open; network pool size 2; image ${
      source === "import"
        ? "imported into the ImageStore (no registry call)"
        : "pulled once from a local docker-registry; a start within the image store's tag freshness window (60 s) does not ask the registry again"
    }`;
  }

  async setup(): Promise<void> {
    const { cleanup } = this.ctx;
    const dir = benchTempDir(cleanup, "berth-bench-host-");
    const names = await testNames();
    cleanup.add(`sweep network names ${names.namePrefix}`, () => cleanupNetworkByPrefix(names));
    const net = await Network.start({
      dataDir: join(dir, "net"),
      bridge: names.bridge,
      table: names.table,
      namePrefix: names.namePrefix,
      subnet4: names.subnet4,
      subnet6: names.subnet6,
      enableForwarding: false,
    });
    cleanup.add("destroy the network", () => net.destroy());
    this.net = net;
    const images = new ImageStore({ root: join(dir, "images") });
    if (this.source === "import") {
      const archive = join(dir, "image.tar");
      await mustExec(
        "skopeo",
        ["copy", "--quiet", `oci:${this.ctx.layout}:${this.ctx.imageTag}`, `oci-archive:${archive}`],
        { timeoutMs: 300_000 },
      );
      this.imageRef = "berth-bench/python:bookworm";
      await images.importArchive(archive, { name: this.imageRef });
    } else {
      const registry = await startTestRegistry({
        after: (fn) => cleanup.add("stop the registry", async () => void (await fn())),
      });
      this.imageRef = await pushTestImage(registry);
      await images.pull(this.imageRef);
    }
    const cgroupParent = `/berth-bench-host-${this.source}-${this.ctx.runId}`;
    let runtime: ContainerRuntime | undefined;
    const host = await ContainerHost.start({
      root: join(dir, "host"),
      images: this.timed(images, "images", ["pull"]),
      network: this.timed(net, "network", ["attach", "allowInbound"]),
      runtime: (hooks) => {
        // As the agent runs it: two disks made ahead of demand.
        runtime = new ContainerRuntime({
          root: join(dir, "containers"),
          cgroupParent,
          diskPoolSize: 2,
          ...hooks,
        });
        return this.timed(runtime, "runtime", ["run"]);
      },
      capacity: { cpuCores: 64, memoryBytes: 64 * 1024 ** 3 },
      onEvent: (e) => this.onEvent(e),
      onLog: (l) => this.onLog(l),
    });
    this.host = host;
    cleanup.add("remove the host's containers", async () => {
      for (const c of await host.listContainers())
        await host.stopContainer(c.id, { graceMs: 0, remove: true });
      host.close();
      await runtime?.drainDisks();
      removeCgroup(cgroupParent);
    });
  }

  async measure(i: number): Promise<StartSample> {
    const host = this.host!;
    const id = `${this.ctx.runId}-host-${this.source}${this.userNamespace ? "" : "-nouserns"}-${i}`;
    const w = waiter();
    this.waiters.set(id, w);
    // Not a time: how many pooled namespaces were ready (0 means attach had to create one).
    const poolReady = this.net?.poolAvailable ?? -1;
    this.phases = {};
    const t0 = performance.now();
    try {
      await withTimeout(
        host.runContainer({
          id,
          image: this.imageRef,
          args: this.ctx.args,
          cpu: 1,
          memoryBytes: 512 * 1024 * 1024,
          ...(this.userNamespace ? {} : { userNamespace: false }),
        }),
        30_000,
        "ContainerHost.runContainer",
      );
      const runningAt = performance.now();
      const printAt = await withTimeout(w.ready, 30_000, `onLog ${READY_LINE}`);
      const exit = await withTimeout(w.exit, 30_000, "the exit event");
      if (exit.status.exitCode !== 0)
        throw new Error(`container exited ${exit.status.exitCode}: ${exit.stderrTail}`);
      const inDeps = Object.values(this.phases).reduce((a, b) => a + b, 0);
      return {
        runningMs: runningAt - t0,
        printMs: printAt - t0,
        phases: { ...this.phases, hostOwn: runningAt - t0 - inDeps, poolReadyCount: poolReady },
      };
    } finally {
      this.waiters.delete(id);
      await host.stopContainer(id, { graceMs: 0, remove: true }).catch(() => {});
    }
  }

  /**
   * The same object, with the named async methods timed into this.phases
   * (`<what>.<method>`): the host takes its dependencies as parameters, so
   * its phases can be measured from outside without touching agent code.
   */
  private timed<T extends object>(target: T, what: string, methods: string[]): T {
    return new Proxy(target, {
      get: (obj, prop, receiver) => {
        const v = Reflect.get(obj, prop, receiver);
        if (typeof v !== "function" || typeof prop !== "string" || !methods.includes(prop)) {
          return typeof v === "function" ? v.bind(obj) : v;
        }
        return async (...args: unknown[]) => {
          const start = performance.now();
          try {
            return await v.apply(obj, args);
          } finally {
            const key = `${what}.${prop}`;
            this.phases[key] = (this.phases[key] ?? 0) + performance.now() - start;
          }
        };
      },
    });
  }

  private onLog(l: LogEntry): void {
    if (l.stream === "stdout" && l.line === READY_LINE)
      this.waiters.get(l.containerId)?.resolveReady(performance.now());
  }

  private onEvent(e: HostEvent): void {
    if (e.type === "exit") this.waiters.get(e.containerId)?.resolveExit(e);
  }
}

function waiter(): Waiter {
  const w = {} as Waiter;
  w.ready = new Promise((r) => {
    w.resolveReady = r;
  });
  w.exit = new Promise((r) => {
    w.resolveExit = r;
  });
  return w;
}
