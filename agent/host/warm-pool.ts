// Containers started ahead of demand (docs/runtime.md, "Pre-warmed runners"
// and "Pre-warmed sandboxes"): each waits, holding nothing of any workspace
// and with its network namespace's port down, connected to a socket the
// agent serves. One is given to one request's container, once: its network
// bound to the id with the request's egress policy, its cgroup the request's
// limits, then its environment sent on that socket. From then on it is that
// container, and it never comes back. What a kind starts and how it hands
// over its own parts (a runner's bridge and code, a sandbox's process server)
// is the subclass's (warm-runners.ts, warm-sandboxes.ts).

import { randomBytes } from "node:crypto";
import { renameSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { describeError } from "../../shared/errors.ts";
import type { ImageInfo } from "../images/index.ts";
import type { ReservedNetwork } from "../network/index.ts";
import type { ContainerStatus } from "../../api/index.ts";
import type { ContainerSpec } from "../runtime/index.ts";
import { defaultHostname, hostsFileText } from "./container-spec.ts";
import type { ProvisionDeps, ReservedStart } from "./provision.ts";
import { newHostRecord, recordStatus } from "./records.ts";
import { mergeEnv, type ResolvedRunRequest } from "./request.ts";

/** How long after a container was taken the pool starts its replacement. */
const REFILL_DELAY_MS = 500;
/** A failed refill is tried again after this, then twice as long each time, up to MAX_RETRY_MS. */
const FIRST_RETRY_MS = 2_000;
const MAX_RETRY_MS = 60_000;
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export interface WarmContainer {
  id: string;
  image: ImageInfo;
  net: ReservedNetwork;
  server: Server;
  /** The container, connected once it is ready to be given. */
  conn?: Socket;
  hostsFile: string;
  /** The socket `server` listens on (removed when it is given or goes). */
  socketPath: string;
}

/** What a kind's own hand-over steps leave for the common ones. */
export interface HandedOver {
  /** The request as the container now runs it (env, labels, cwd). */
  req: ResolvedRunRequest;
  /** What lifts the start-up CPU cap (runners), armed once it is given. */
  endStartup?: { arm(): void };
}

type Undo = { what: string; fn: () => unknown }[];

export abstract class WarmPool {
  private readonly ready: WarmContainer[] = [];
  private readonly byId = new Map<string, WarmContainer>();
  private filling?: Promise<void>;
  private refillTimer?: NodeJS.Timeout;
  private retryMs = FIRST_RETRY_MS;
  private closed = false;

  constructor(
    protected readonly d: ProvisionDeps,
    readonly size: number,
  ) {}

  /** "pre-warmed runner", "pre-warmed sandbox": in log lines. */
  protected abstract readonly what: string;
  /** The start of its containers' ids (`<prefix><12 hex>`). */
  protected abstract readonly idPrefix: string;
  /** The image it starts; undefined: the image store's default. */
  protected abstract readonly imageRef: string | undefined;
  /** Why a request cannot take one of these (undefined: it can). */
  abstract ineligible(req: ResolvedRunRequest, mounts: number): string | undefined;
  /** Makes the directory the container waits in; returns the spec to start and where the agent's socket goes. */
  protected abstract prepare(w: Omit<WarmContainer, "server" | "socketPath">): {
    spec: ContainerSpec;
    socketPath: string;
  };
  /** Removes what prepare() made, under the container's first id. */
  protected abstract unprepare(id: string): void;
  /** Once the agent's socket listens, before the container starts (its owner, say). */
  protected listening(_socketPath: string, _spec: ContainerSpec): void {}
  /** A CPU cap above the request's for its start-up (runners); undefined: none. */
  protected startupCpu(_req: ResolvedRunRequest): number | undefined {
    return undefined;
  }
  /** The kind's own steps of give(), each with its undo pushed first. */
  protected abstract handOver(w: WarmContainer, r: ReservedStart, undo: Undo): Promise<HandedOver>;

  /** Containers ready to be given now. */
  get available(): number {
    return this.ready.length;
  }

  owns(id: string): boolean {
    return this.byId.has(id);
  }

  /**
   * Starts containers in the background until `size` exist. A failure (say,
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
          `starting a ${this.what}`,
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
   * the start that just took one (a runner importing its user's module).
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

  /** A ready container of this image, out of the pool for good; undefined when there is none. */
  take(imageDigest: string): WarmContainer | undefined {
    const i = this.ready.findIndex((w) => w.image.digest === imageDigest && w.conn && !w.conn.destroyed);
    if (i < 0) return undefined;
    const w = this.ready.splice(i, 1)[0] as WarmContainer;
    this.byId.delete(w.id);
    return w;
  }

  /** A container of the pool ended before it was given: it goes, and another is started. */
  exited(id: string): void {
    const w = this.byId.get(id);
    if (!w) return;
    this.forget(w);
    void this.discard(w, id).then(() => this.refill());
  }

  /**
   * Stops serving the containers' sockets and starts no more (the host
   * closes for an agent restart): they hang up and exit, and the next agent
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

  /** Removes every container not given yet (the agent stops). */
  async drain(): Promise<void> {
    this.closed = true;
    clearTimeout(this.refillTimer);
    await this.settled();
    for (const w of [...this.byId.values()]) {
      this.forget(w);
      await this.discard(w, w.id);
    }
  }

  private forget(w: WarmContainer): void {
    this.byId.delete(w.id);
    const i = this.ready.indexOf(w);
    if (i >= 0) this.ready.splice(i, 1);
  }

  private async startOne(): Promise<void> {
    const { options, runtime } = this.d;
    const network = options.network;
    if (!network.reserve || !network.unreserve)
      throw new Error("this host's network cannot reserve namespaces");
    const id = `${this.idPrefix}${randomBytes(6).toString("hex")}`;
    const image = await options.images.pull(this.imageRef);
    options.images.markInUse(image.digest, id);
    const hostsFile = join(this.d.hostsDir, id);
    let net: ReservedNetwork | undefined;
    let server: Server | undefined;
    try {
      net = await network.reserve();
      writeFileSync(hostsFile, hostsFileText(defaultHostname(id)), { mode: 0o644 });
      const { spec, socketPath } = this.prepare({ id, image, net, hostsFile });
      const w: WarmContainer = { id, image, net, server: createServer(), hostsFile, socketPath };
      server = w.server;
      server.on("connection", (conn) => {
        if (w.conn || !this.byId.has(id)) return void conn.destroy();
        w.conn = conn;
        conn.on("error", () => {});
        // One that hangs up before it was given is not ready any more; its exit removes it.
        conn.on("close", () => {
          const i = this.ready.indexOf(w);
          if (i >= 0) this.ready.splice(i, 1);
        });
        this.ready.push(w);
        options.logger.info({ warm: id, ready: this.ready.length }, `a ${this.what} is ready`);
      });
      await new Promise<void>((res, rej) => {
        server?.once("error", rej);
        server?.listen(socketPath, () => res());
      });
      this.listening(socketPath, spec);
      this.byId.set(id, w);
      await runtime.run(spec);
    } catch (e) {
      const w = this.byId.get(id);
      if (w) this.forget(w);
      server?.close();
      await runtime.delete(id).catch(() => {});
      if (net) await network.unreserve(net).catch(() => {});
      this.unprepare(id);
      rmSync(hostsFile, { force: true });
      options.images.release(image.digest, id);
      throw e;
    }
  }

  /** Removes a container never given (or that failed while being given), under the name the runtime has for it. */
  private async discard(w: WarmContainer, runtimeId: string): Promise<void> {
    const { options, runtime } = this.d;
    w.conn?.destroy();
    w.server.close();
    try {
      await runtime.delete(runtimeId);
    } catch (e) {
      options.logger.error({ id: runtimeId, err: describeError(e) }, `removing a ${this.what}`);
    }
    await options.network.unreserve?.(w.net).catch(() => {});
    this.unprepare(w.id);
    rmSync(w.hostsFile, { force: true });
    options.images.release(w.image.digest, w.id);
  }

  /**
   * A container of the pool made the request's container, when one of its
   * image is ready and the request asks nothing a started container cannot
   * take; undefined otherwise, or when giving it failed (it is removed then,
   * and the caller starts the container the ordinary way).
   */
  async giveFor(
    req: ResolvedRunRequest,
    mounts: number,
    codeDir: string | undefined,
  ): Promise<ContainerStatus | undefined> {
    if (this.available === 0 || this.ineligible(req, mounts)) return undefined;
    const { images, logger } = this.d.options;
    const creds = req.credentials && {
      kind: "basic" as const,
      source: "generic" as const,
      ...req.credentials,
    };
    // A pull that fails here fails again on the ordinary path, which says so in its own words.
    const image = await images.pull(req.image, creds ? { credentials: creds } : {}).catch(() => undefined);
    const w = image && this.take(image.digest);
    if (!w) return undefined;
    try {
      const ms: Record<string, number> = {};
      const status = await this.give(w, { req, gpus: [], mounts: [], codeDir }, ms);
      logger.info({ id: req.id, warm: w.id, ms }, `container started from a ${this.what}`);
      return status;
    } catch {
      return undefined;
    } finally {
      this.refillSoon();
    }
  }

  /**
   * Makes `w` the container `r.req.id`: its network bound to the id with
   * the request's egress policy and port up, the kind's own steps, its cgroup
   * the request's limits, then the container's environment (secrets
   * included) sent on its socket; nothing of the request runs before that.
   * On a failure the container is removed and what was made for the id
   * undone; the caller then starts one the ordinary way. The reservation
   * (CPU, memory) is the caller's. `ms` gets how long each step took (the log line says).
   */
  async give(w: WarmContainer, r: ReservedStart, ms: Record<string, number> = {}): Promise<ContainerStatus> {
    const { options, runtime } = this.d;
    const log = options.logger;
    const { req } = r;
    const id = req.id;
    if (!runtime.assign) throw new Error("this host's runtime cannot give a started container a new id");
    let runtimeId = w.id;
    const undo: Undo = [];
    const t0 = performance.now();
    let at = t0;
    const took = (step: string) => {
      const now = performance.now();
      ms[step] = Math.round((now - at) * 10) / 10;
      at = now;
    };
    const startupCpu = this.startupCpu(req);
    const limits = {
      cpu: req.cpu,
      ...(startupCpu === undefined ? {} : { startupCpu }),
      memoryBytes: req.memoryBytes,
      ...(req.pidsLimit === undefined ? {} : { pidsLimit: req.pidsLimit }),
      ...(req.timeoutMs === undefined ? {} : { timeoutMs: req.timeoutMs }),
    };
    try {
      undo.push({ what: "network", fn: () => options.network.detach(id) });
      const hostsFile = join(this.d.hostsDir, id);
      undo.push({ what: "hosts file", fn: () => rmSync(hostsFile, { force: true }) });
      // The network and `runc update` are independent, each some 10-30 ms: side by side, both settled.
      const [attached, limited] = await Promise.allSettled([
        (async () => {
          const net = await options.network.attach(id, req.egress, w.net);
          for (const port of req.exposedPorts) await options.network.allowInbound(id, port);
          // Renamed, then written in place: the file mounted at /etc/hosts stays the same inode.
          renameSync(w.hostsFile, hostsFile);
          w.hostsFile = hostsFile;
          writeFileSync(hostsFile, hostsFileText(defaultHostname(w.id), net.ipv4, net.ipv6));
          return net;
        })(),
        runtime.limit?.(w.id, { ...limits, labels: {} }),
      ]);
      if (attached.status === "rejected") throw attached.reason;
      if (limited.status === "rejected") throw limited.reason;
      const net = attached.value;
      took("networkAndLimits");
      const run = await this.handOver(w, r, undo);
      took("own");
      const record = newHostRecord(run.req, w.image, [], net);
      undo.push({ what: "host record", fn: () => this.d.forget(id) });
      this.d.keep(record);
      const env = mergeEnv(w.image.config.env, run.req.env);
      env.PATH ??= DEFAULT_PATH;
      const cwd = run.req.cwd ?? (w.image.config.workingDir || "/");
      // `runc exec` (a tty shell) starts from the same environment as the container's own processes.
      await runtime.assign(
        w.id,
        id,
        { ...limits, labels: run.req.labels, exec: { env, cwd } },
        { limited: !!runtime.limit },
      );
      runtimeId = id;
      took("assign");
      options.images.markInUse(w.image.digest, id);
      options.images.release(w.image.digest, w.id);
      await new Promise<void>((res, rej) => {
        const conn = w.conn;
        if (!conn || conn.destroyed) return rej(new Error(`the ${this.what} hung up`));
        conn.end(`${JSON.stringify({ env, cwd })}\n`, () => res());
      });
      w.server.close();
      rmSync(w.socketPath, { force: true });
      run.endStartup?.arm();
      took("env");
      ms.total = Math.round((performance.now() - t0) * 10) / 10;
      return recordStatus(record, runtime.get(id));
    } catch (e) {
      log.warn({ id, warm: w.id, err: describeError(e) }, `a ${this.what} could not be given`);
      // It never goes back: whatever it got of the request goes with it.
      await this.discard(w, runtimeId);
      for (const u of undo.reverse()) {
        try {
          await u.fn();
        } catch (c) {
          log.error({ id, undo: u.what, err: describeError(c) }, `undoing a ${this.what}'s assignment`);
        }
      }
      throw e;
    }
  }
}
