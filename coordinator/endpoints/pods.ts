// Deployed pods (docs/sandboxes.md, Pods): `/endpoint/{name}` of a pod
// deployment is a plain proxy to the first port of one of its running
// containers. No task is recorded: a pod is a server of its own, not a
// handler the coordinator schedules requests onto.

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { BerthError } from "../../shared/errors.ts";
import { errorOf, forwardPlain, upstreamHeaders } from "../containers/index.ts";
import { MaskedError, refuseUpgrade, sendError } from "../http/index.ts";
import type { StubRecord } from "../tasks/index.ts";
import type { Resolved } from "./resolve.ts";
import type { EndpointContainer, EndpointDeps } from "./types.ts";
import { spliceUpgrade, upgradeHead } from "./websocket.ts";

/** How long a request waits for a pod container that is still starting. */
export const POD_START_WAIT_MS = 60_000;

export interface PodTarget {
  containerId: string;
  agentId: string;
  port: number;
}

type PodDeps = Pick<EndpointDeps, "containers" | "tunnels" | "log">;

/** Spreads requests over a pod deployment's running containers. */
export class PodRouter {
  private turn = 0;

  constructor(
    private readonly deps: PodDeps,
    private readonly waitMs = POD_START_WAIT_MS,
  ) {}

  /** A running container of the pod and its first port; waits for one while the pod starts. */
  async target(stub: StubRecord, signal: AbortSignal): Promise<PodTarget> {
    const port = stub.extra.ports?.[0];
    if (port === undefined) {
      throw new BerthError(
        "not_found",
        `pod '${stub.name}' exposes no port: give it ports=[...] to reach it over HTTP`,
      );
    }
    const c = this.pick(stub.id) ?? (await this.waitForRunning(stub, signal));
    return { containerId: c.id, agentId: c.agentId, port };
  }

  private pick(stubId: string): EndpointContainer | undefined {
    const running = this.deps.containers.containersOf(stubId).filter((c) => c.state === "running");
    if (running.length === 0) return undefined;
    this.turn = (this.turn + 1) % 1_000_000;
    return running[this.turn % running.length];
  }

  private waitForRunning(stub: StubRecord, signal: AbortSignal): Promise<EndpointContainer> {
    return new Promise((resolve, reject) => {
      const done = (err: BerthError | undefined, c?: EndpointContainer) => {
        clearTimeout(timer);
        unsubscribe();
        signal.removeEventListener("abort", onAbort);
        if (err) reject(err);
        else resolve(c as EndpointContainer);
      };
      const unsubscribe = this.deps.containers.onContainersChange((stubId) => {
        if (stubId !== stub.id) return;
        const c = this.pick(stub.id);
        if (c) done(undefined, c);
      });
      const timer = setTimeout(
        () =>
          done(
            new BerthError(
              "unavailable",
              `no container of pod '${stub.name}' is running after ${Math.round(this.waitMs / 1000)} s; see its logs`,
            ),
          ),
        this.waitMs,
      );
      const onAbort = () => done(new BerthError("cancelled", "the caller went away"));
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** One plain HTTP request to the pod. */
  async serveHttp(
    target: { r: Resolved; rest: string; query: string; prefix: string },
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const { r, rest, query, prefix } = target;
    const gone = new AbortController();
    const onClose = () => gone.abort();
    res.once("close", onClose);
    try {
      let t: PodTarget;
      try {
        t = await this.target(r.stub, gone.signal);
      } catch (e) {
        sendError(res, e, { log: this.deps.log, what: "pod request failed", context: { url: req.url } });
        return;
      }
      await forwardPlain({
        agent: this.deps.tunnels.httpAgent(t.agentId, t.containerId, t.port),
        containerId: t.containerId,
        port: t.port,
        method: req.method ?? "GET",
        path: `${rest}${query}`,
        headers: upstreamHeaders(req.headers, {
          dropAuthorization: r.tokenUsed,
          remoteAddress: req.socket.remoteAddress,
          prefix,
        }),
        req,
        res,
        log: this.deps.log,
        about: `pod '${r.stub.name}'`,
      });
    } finally {
      res.off("close", onClose);
    }
  }

  /** A websocket (any upgrade) to the pod. */
  async serveUpgrade(
    target: { r: Resolved; rest: string; query: string; prefix: string },
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
  ): Promise<void> {
    const { r, rest, query, prefix } = target;
    const gone = new AbortController();
    const onClose = () => gone.abort();
    socket.once("close", onClose);
    const refuse = (e: unknown) =>
      void refuseUpgrade(socket, e, {
        log: this.deps.log,
        what: "pod upgrade failed",
        context: { url: req.url },
      });
    let upstream: Duplex;
    try {
      let t: PodTarget;
      try {
        t = await this.target(r.stub, gone.signal);
      } catch (e) {
        return refuse(e);
      }
      try {
        upstream = await this.deps.tunnels.connect(t.agentId, t.containerId, t.port, { signal: gone.signal });
      } catch (e) {
        const detail = `cannot reach port ${t.port} of container ${t.containerId}: ${errorOf(e)}`;
        return refuse(new MaskedError("bad_gateway", detail, { about: `pod '${r.stub.name}'`, cause: e }));
      }
    } finally {
      socket.off("close", onClose);
    }
    const headers = upstreamHeaders(req.headers, {
      dropAuthorization: r.tokenUsed,
      remoteAddress: req.socket.remoteAddress,
      prefix,
    });
    headers.connection = "Upgrade";
    if (req.headers.upgrade) headers.upgrade = req.headers.upgrade;
    await spliceUpgrade(socket, upstream, upgradeHead(req.method ?? "GET", `${rest}${query}`, headers), head);
  }
}
