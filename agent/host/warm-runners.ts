// Pre-warmed runners (docs/runtime.md, "Pre-warmed runners"): runner
// containers started ahead of demand, with Python running and berth's runner
// imported, waiting on a socket of their bridge directory for a stub. Before
// that they hold no code, no secrets and no stub's environment, and their
// network namespace's port is down. One is given to one stub's container,
// once: from then on it is that container, and it never comes back here.

import { randomBytes } from "node:crypto";
import { renameSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { describeError } from "../../shared/errors.ts";
import { RunnerPaths } from "../../shared/tasks.ts";
import type { ImageInfo } from "../images/index.ts";
import type { ReservedNetwork } from "../network/index.ts";
import type { ContainerStatus } from "../../api/index.ts";
import { defaultHostname, hostsFileText } from "./container-spec.ts";
import type { ProvisionDeps, ReservedStart } from "./provision.ts";
import { newHostRecord, recordStatus } from "./records.ts";
import { imageUser, mergeEnv, type ResolvedRunRequest } from "./request.ts";
import { applyRunner } from "./runner.ts";
import { startupEnder } from "./startup.ts";

/** The socket a pre-warmed runner waits on, in its bridge directory. */
export const WARM_SOCKET_NAME = "warm.sock";
const WARM_ARGS = ["python3", "-u", "-m", "berth.runtime.warm_runner"];
/** While it waits: little CPU weight (it sleeps on a socket), enough memory for the interpreter. */
const WARM_CPU = 0.25;
const WARM_MEMORY_BYTES = 256 * 1024 * 1024;
const WARM_LABEL = "berth.warm-runner";
/** How long after a runner was taken the pool starts its replacement. */
const REFILL_DELAY_MS = 500;
/** A failed refill is tried again after this, then twice as long each time, up to MAX_RETRY_MS. */
const FIRST_RETRY_MS = 2_000;
const MAX_RETRY_MS = 60_000;

interface WarmRunner {
  id: string;
  image: ImageInfo;
  net: ReservedNetwork;
  server: Server;
  /** The runner, connected once its imports are done: it is ready. */
  conn?: Socket;
  hostsFile: string;
}

/** Why a request cannot take a pre-warmed runner (undefined: it can). */
export function warmIneligible(req: ResolvedRunRequest, mounts: number): string | undefined {
  if (!req.runner) return "not a runner";
  if (req.args.length > 0) return "its own program";
  if (req.gpu && (req.gpu.count ?? 0) > 0) return "GPUs";
  if (mounts > 0 || req.volumes.length > 0 || req.buckets.length > 0) return "mounts";
  if (req.isolation === "gvisor") return "gVisor";
  // Pooled runners start with the defaults: a workspace opted out of either starts cold.
  if (req.userNamespace === false) return "no user namespace";
  if (req.syscallFilter === "denylist") return "the deny-list system call filter";
  if (req.user || req.hostname || req.cwd) return "its own user, hostname or working directory";
  if (req.startupWindowMs) return "a start-up window";
  // A started runner's environment is fixed: the gang's (gangEnv) cannot be added after.
  if (req.gang) return "a gang member";
  return undefined;
}

export class WarmRunners {
  private readonly ready: WarmRunner[] = [];
  private readonly byId = new Map<string, WarmRunner>();
  private filling?: Promise<void>;
  private refillTimer?: NodeJS.Timeout;
  private retryMs = FIRST_RETRY_MS;
  private closed = false;

  constructor(
    private readonly d: ProvisionDeps,
    readonly size: number,
  ) {}

  /** Pre-warmed runners ready to be given now. */
  get available(): number {
    return this.ready.length;
  }

  owns(id: string): boolean {
    return this.byId.has(id);
  }

  /**
   * Starts runners in the background until `size` exist. A failure (say,
   * the image is not in the store yet) is logged and the round tried again
   * later, waiting twice as long each time up to a minute.
   */
  refill(): void {
    if (this.closed || this.filling || this.size === 0) return;
    this.filling = (async () => {
      try {
        while (!this.closed && this.byId.size < this.size) await this.startOne();
        this.retryMs = FIRST_RETRY_MS;
      } catch (e) {
        this.d.options.logger.warn(
          { err: describeError(e), retryInMs: this.retryMs },
          "starting a pre-warmed runner",
        );
        this.later(this.retryMs);
        this.retryMs = Math.min(this.retryMs * 2, MAX_RETRY_MS);
      } finally {
        this.filling = undefined;
      }
    })();
  }

  /**
   * refill(), a little later: starting a container now would take CPU from
   * the start that just took a runner (its user module is being imported).
   */
  refillSoon(): void {
    this.later(REFILL_DELAY_MS);
  }

  private later(ms: number): void {
    if (this.refillTimer || this.closed) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = undefined;
      this.refill();
    }, ms);
    this.refillTimer.unref();
  }

  /** Resolves once the current refill round is over (tests, bench). */
  async settled(): Promise<void> {
    while (this.filling) await this.filling;
  }

  /** A ready runner of this image, out of the pool for good; undefined when there is none. */
  take(imageDigest: string): WarmRunner | undefined {
    const i = this.ready.findIndex((w) => w.image.digest === imageDigest && w.conn && !w.conn.destroyed);
    if (i < 0) return undefined;
    const w = this.ready.splice(i, 1)[0] as WarmRunner;
    this.byId.delete(w.id);
    return w;
  }

  /** A pre-warmed runner ended before it was given: it goes, and another is started. */
  exited(id: string): void {
    const w = this.byId.get(id);
    if (!w) return;
    this.forget(w);
    void this.discard(w, id).then(() => this.refill());
  }

  /**
   * Stops serving the runners' sockets and starts no more (the host closes
   * for an agent restart): they hang up and exit, and the next agent
   * removes them, having no record of them.
   */
  close(): void {
    this.closed = true;
    clearTimeout(this.refillTimer);
    for (const w of this.byId.values()) {
      w.conn?.destroy();
      w.server.close();
    }
  }

  /** Removes every runner not given yet (the agent stops). */
  async drain(): Promise<void> {
    this.closed = true;
    clearTimeout(this.refillTimer);
    await this.settled();
    for (const w of [...this.byId.values()]) {
      this.forget(w);
      await this.discard(w, w.id);
    }
  }

  private forget(w: WarmRunner): void {
    this.byId.delete(w.id);
    const i = this.ready.indexOf(w);
    if (i >= 0) this.ready.splice(i, 1);
  }

  private async startOne(): Promise<void> {
    const { options, runtime, bridges } = this.d;
    const network = options.network;
    if (!network.reserve || !network.unreserve)
      throw new Error("this host's network cannot reserve namespaces");
    const id = `warm-${randomBytes(6).toString("hex")}`;
    const image = await options.images.pull(options.warmRunnerImage);
    options.images.markInUse(image.digest, id);
    const hostsFile = join(this.d.hostsDir, id);
    let net: ReservedNetwork | undefined;
    let server: Server | undefined;
    try {
      net = await network.reserve();
      writeFileSync(hostsFile, hostsFileText(defaultHostname(id)), { mode: 0o644 });
      const bridgeDir = bridges.makeDir(id);
      const w: WarmRunner = { id, image, net, server: createServer(), hostsFile };
      server = w.server;
      server.on("connection", (conn) => {
        if (w.conn || !this.byId.has(id)) return void conn.destroy();
        w.conn = conn;
        conn.on("error", () => {});
        // A runner that hangs up before it was given is not ready any more; its exit removes it.
        conn.on("close", () => {
          const i = this.ready.indexOf(w);
          if (i >= 0) this.ready.splice(i, 1);
        });
        this.ready.push(w);
      });
      await new Promise<void>((res, rej) => {
        server?.once("error", rej);
        server?.listen(join(bridgeDir, WARM_SOCKET_NAME), () => res());
      });
      this.byId.set(id, w);
      await runtime.run({
        id,
        image: { rootfs: image.layers },
        args: WARM_ARGS,
        env: mergeEnv(image.config.env, {
          BERTH_REMOTE: "1",
          BERTH_WARM_SOCKET: `${RunnerPaths.bridgeDir}/${WARM_SOCKET_NAME}`,
          PYTHONPATH: RunnerPaths.sdk,
        }),
        cwd: "/",
        user: imageUser(image.config.user) ?? { uid: 0, gid: 0 },
        cpu: WARM_CPU,
        ...(options.runnerStartupCpu > WARM_CPU ? { startupCpu: options.runnerStartupCpu } : {}),
        memoryBytes: WARM_MEMORY_BYTES,
        mounts: [
          { source: bridgeDir, destination: RunnerPaths.bridgeDir, readonly: false, idmapped: true },
          { source: options.sdkDir, destination: RunnerPaths.sdk, readonly: true },
          { source: net.resolvConfPath, destination: "/etc/resolv.conf", readonly: true },
          { source: hostsFile, destination: "/etc/hosts", readonly: true },
        ],
        netnsPath: net.netnsPath,
        labels: { [WARM_LABEL]: "1" },
        codeSlot: RunnerPaths.code,
        // As every container whose workspace did not opt out (warmIneligible turns those away).
        userNamespace: true,
      });
    } catch (e) {
      const w = this.byId.get(id);
      if (w) this.forget(w);
      server?.close();
      await runtime.delete(id).catch(() => {});
      if (net) await network.unreserve(net).catch(() => {});
      bridges.removeDir(id);
      rmSync(hostsFile, { force: true });
      options.images.release(image.digest, id);
      throw e;
    }
  }

  /** Removes a runner that was never given (or failed while being given), under the name the runtime has for it. */
  private async discard(w: WarmRunner, runtimeId: string): Promise<void> {
    const { options, runtime, bridges } = this.d;
    w.conn?.destroy();
    w.server.close();
    try {
      await runtime.delete(runtimeId);
    } catch (e) {
      options.logger.error({ id: runtimeId, err: describeError(e) }, "removing a pre-warmed runner");
    }
    await options.network.unreserve?.(w.net).catch(() => {});
    bridges.removeDir(w.id);
    rmSync(w.hostsFile, { force: true });
    options.images.release(w.image.digest, w.id);
  }

  /**
   * A pre-warmed runner made the request's container, when one of its image
   * is ready and the request asks nothing a started container cannot take;
   * undefined otherwise, or when giving it failed (it is removed then, and
   * the caller starts the container the ordinary way).
   */
  async giveFor(
    req: ResolvedRunRequest,
    mounts: number,
    codeDir: string | undefined,
  ): Promise<ContainerStatus | undefined> {
    if (this.available === 0 || warmIneligible(req, mounts)) return undefined;
    const { images, logger } = this.d.options;
    const creds = req.credentials && {
      kind: "basic" as const,
      source: "generic" as const,
      ...req.credentials,
    };
    const image = await images.pull(req.image, creds ? { credentials: creds } : {});
    const w = this.take(image.digest);
    if (!w) return undefined;
    try {
      const status = await this.give(w, { req, gpus: [], mounts: [], codeDir });
      logger.info({ id: req.id, warmRunner: w.id }, "container started from a pre-warmed runner");
      return status;
    } catch {
      return undefined;
    } finally {
      this.refillSoon();
    }
  }

  /**
   * Makes `w` the container `r.req.id`: its network bound to the id with
   * the request's egress policy and port up, its bridge served for the stub,
   * the code on its slot, its cgroup the request's limits, then the stub's
   * environment (secrets included) sent on its socket; the user's module is
   * imported only after all of that. On a failure the runner is removed and
   * what was made for the id undone; the caller then starts a container the
   * ordinary way. The reservation (CPU, memory) is the caller's.
   */
  async give(w: WarmRunner, r: ReservedStart): Promise<ContainerStatus> {
    const { options, runtime, bridges } = this.d;
    const log = options.logger;
    const { req, codeDir } = r;
    const id = req.id;
    const runner = req.runner;
    if (!runner || !runtime.assign || !runtime.mountCode) throw new Error("not a runner request");
    let runtimeId = w.id;
    const undo: { what: string; fn: () => unknown }[] = [];
    try {
      undo.push({ what: "network", fn: () => options.network.detach(id) });
      const net = await options.network.attach(id, req.egress, w.net);
      for (const port of req.exposedPorts) await options.network.allowInbound(id, port);
      const hostsFile = join(this.d.hostsDir, id);
      undo.push({ what: "hosts file", fn: () => rmSync(hostsFile, { force: true }) });
      // Renamed, then written in place: the file mounted at /etc/hosts stays the same inode.
      renameSync(w.hostsFile, hostsFile);
      w.hostsFile = hostsFile;
      writeFileSync(hostsFile, hostsFileText(defaultHostname(w.id), net.ipv4, net.ipv6));
      const startupCpu = options.runnerStartupCpu > req.cpu ? options.runnerStartupCpu : undefined;
      const endStartup =
        startupCpu === undefined ? undefined : startupEnder(runtime, log, id, options.runnerStartupMs);
      undo.push({ what: "task bridge", fn: () => bridges.close(id) });
      const bridgeDir = await bridges.adopt(w.id, id, runner, endStartup?.now);
      const run = applyRunner(req, runner, { codeDir, bridgeDir, sdkDir: options.sdkDir });
      if (codeDir) await runtime.mountCode(w.id, codeDir);
      const record = newHostRecord(run.req, w.image, [], net);
      undo.push({ what: "host record", fn: () => this.d.forget(id) });
      this.d.keep(record);
      await runtime.assign(w.id, id, {
        cpu: req.cpu,
        ...(startupCpu === undefined ? {} : { startupCpu }),
        memoryBytes: req.memoryBytes,
        ...(req.pidsLimit === undefined ? {} : { pidsLimit: req.pidsLimit }),
        labels: run.req.labels,
        ...(req.timeoutMs === undefined ? {} : { timeoutMs: req.timeoutMs }),
      });
      runtimeId = id;
      options.images.markInUse(w.image.digest, id);
      options.images.release(w.image.digest, w.id);
      const env = mergeEnv(w.image.config.env, run.req.env);
      env.PATH ??= "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
      const cwd = run.req.cwd ?? (w.image.config.workingDir || "/");
      await new Promise<void>((res, rej) => {
        const conn = w.conn;
        if (!conn || conn.destroyed) return rej(new Error("the pre-warmed runner hung up"));
        conn.end(`${JSON.stringify({ env, cwd })}\n`, () => res());
      });
      w.server.close();
      endStartup?.arm();
      return recordStatus(record, runtime.get(id));
    } catch (e) {
      log.warn({ id, warmRunner: w.id, err: describeError(e) }, "a pre-warmed runner could not be given");
      // The runner never goes back: whatever it got of the request goes with it.
      await this.discard(w, runtimeId);
      for (const u of undo.reverse()) {
        try {
          await u.fn();
        } catch (c) {
          log.error({ id, undo: u.what, err: describeError(c) }, "undoing a pre-warmed runner's assignment");
        }
      }
      throw e;
    }
  }
}
