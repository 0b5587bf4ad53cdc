// Websockets to realtime and asgi deployments: the upgrade request goes
// through the agent tunnel as it came and the bytes are piped both ways. The
// whole session is one task: RUNNING while open, COMPLETE when closed.

import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import { BerthError } from "../../shared/errors.ts";
import { upstreamHeaders } from "../containers/index.ts";
import { addUpgradeRoute, answerOnSocket, refuseUpgrade } from "../http/index.ts";
import type { DirectOutcome } from "../tasks/index.ts";
import type { EndpointDispatcher, TaskRun, TryResult } from "./dispatch.ts";
import { endpointRoute } from "./raw-route.ts";
import { RUNNER_HTTP_PORT } from "./types.ts";

/** The request line and headers of an upgrade as sent to the container. */
export function upgradeHead(
  method: string,
  path: string,
  headers: Record<string, string | string[]>,
): string {
  return `${method} ${path} HTTP/1.1\r\n${Object.entries(headers)
    .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => `${k}: ${x}\r\n`))
    .join("")}\r\n`;
}

/**
 * Pipes an upgrade with no task around it (exposed ports, pods): sends the
 * handshake to the container and the bytes both ways, answer included, until
 * either side closes.
 */
export function spliceUpgrade(
  client: Duplex,
  upstream: Duplex,
  requestHead: string,
  head: Buffer,
): Promise<void> {
  return new Promise<void>((resolve) => {
    const end = () => {
      upstream.destroy();
      client.destroy();
      resolve();
    };
    upstream.on("error", () => {});
    client.on("error", () => {});
    upstream.on("close", end);
    client.on("close", end);
    upstream.write(requestHead);
    if (head.length > 0) upstream.write(head);
    upstream.pipe(client);
    client.pipe(upstream);
  });
}

/**
 * Serves websocket upgrades of /endpoint/... on `server`, through its raw
 * route table (coordinator/http/raw-routes.ts): until the composition root
 * hands endpointRoute to the edge's data plane. Returns a detach.
 */
export function attachEndpointUpgrades(server: Server, endpoints: EndpointDispatcher): () => void {
  return addUpgradeRoute(server, endpointRoute(endpoints));
}

/** One /endpoint/... upgrade, start to end; never rejects (a failure is refused on the socket). */
export function serveEndpointUpgrade(
  endpoints: EndpointDispatcher,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
): void {
  void serveUpgrade(endpoints, req, socket, head).catch((e) => {
    refuseUpgrade(socket, e, {
      log: endpoints.deps.log,
      what: "websocket endpoint request failed",
      context: { url: req.url },
    });
  });
}

async function serveUpgrade(
  endpoints: EndpointDispatcher,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
): Promise<void> {
  const say = (e: unknown) =>
    void refuseUpgrade(socket, e, { log: endpoints.deps.log, what: "websocket endpoint request failed" });
  let target: Awaited<ReturnType<EndpointDispatcher["resolve"]>>;
  try {
    target = await endpoints.resolve(req.url ?? "", req.headers.authorization);
  } catch (e) {
    return say(e);
  }
  if (target.r.kind === "pod") return endpoints.pods.serveUpgrade(target, req, socket, head);
  const { r, rest, query, prefix } = target;
  if (r.kind === "endpoint") {
    return say(
      new BerthError("invalid_request", "an endpoint takes POST requests with a JSON body, not websockets"),
    );
  }
  const run = await endpoints.open(r.stub, null, say, r.tokenId);
  if (!run) return;
  const onClose = () => endpoints.abort(run, "caller");
  socket.once("close", onClose);

  const headers = upstreamHeaders(req.headers, {
    dropAuthorization: r.tokenUsed,
    remoteAddress: req.socket.remoteAddress,
    prefix,
  });
  // The handshake's own headers are what this connection is for.
  headers.connection = "Upgrade";
  if (req.headers.upgrade) headers.upgrade = req.headers.upgrade;
  headers["x-task-id"] = run.task.id;
  const path = r.kind === "asgi" ? `${rest}${query}` : `/${query}`;
  const requestHead = upgradeHead(req.method ?? "GET", path, headers);

  const attempt = async (slot: { containerId: string; agentId: string }): Promise<TryResult> => {
    let upstream: Duplex;
    try {
      upstream = await endpoints.deps.tunnels.connect(slot.agentId, slot.containerId, RUNNER_HTTP_PORT, {
        signal: run.controller.signal,
      });
    } catch (e) {
      if (run.controller.signal.aborted) return { kind: "aborted" };
      return { kind: "retry", error: (e as Error).message };
    }
    return session(run, socket, upstream, requestHead, head);
  };
  try {
    await endpoints.dispatch(run, attempt, (status, body, headers) =>
      answerOnSocket(socket, status, body, { ...headers, "x-task-id": run.task.id }),
    );
  } finally {
    socket.off("close", onClose);
    if (!socket.destroyed) socket.destroy();
  }
}

/**
 * Pipes one websocket session; resolves when either side closes. The
 * container's handshake answer gets the X-Task-Id header.
 */
function session(
  run: TaskRun,
  client: Duplex,
  upstream: Duplex,
  requestHead: string,
  head: Buffer,
): Promise<TryResult> {
  const signal = run.controller.signal;
  return new Promise<TryResult>((resolve) => {
    let answered = false;
    let failedByApp = false;
    let pending = Buffer.alloc(0);
    let done = false;
    const finish = (r: TryResult) => {
      if (done) return;
      done = true;
      signal.removeEventListener("abort", onAbort);
      upstream.destroy();
      client.destroy();
      resolve(r);
    };
    const outcome = (by: "client" | "upstream"): DirectOutcome =>
      !answered
        ? {
            status: "FAILED",
            error: {
              type: "EndpointProxyError",
              message: "the container closed the websocket connection without answering",
              traceback: "",
            },
            reason: "proxy_failed",
          }
        : failedByApp
          ? {
              status: "FAILED",
              error: {
                type: "EndpointError",
                message: "the app failed the websocket handshake",
                traceback: "",
              },
              reason: "handler_error",
            }
          : { status: "COMPLETE", reason: by === "client" ? "client_closed" : "server_closed" };
    // A caller that hangs up on an open session ends it normally; before the answer it cancels.
    const onAbort = () =>
      finish(
        run.why === "caller" && answered ? { kind: "done", outcome: outcome("client") } : { kind: "aborted" },
      );
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    const toClient = (c: Buffer) => {
      if (!client.write(c)) {
        upstream.pause();
        client.once("drain", () => upstream.resume());
      }
    };
    upstream.on("data", (c: Buffer) => {
      if (answered) return toClient(c);
      pending = Buffer.concat([pending, c]);
      const end = pending.indexOf("\r\n\r\n");
      if (end < 0 && pending.length < 65536) return;
      answered = true;
      const headText = pending.subarray(0, end < 0 ? pending.length : end + 2).toString("latin1");
      failedByApp = /\r\nx-berth-error:\s*1\r\n/i.test(headText);
      const line = pending.indexOf("\r\n");
      toClient(
        line >= 0 && end >= 0
          ? Buffer.concat([
              pending.subarray(0, line + 2),
              Buffer.from(`x-task-id: ${run.task.id}\r\n`),
              pending.subarray(line + 2),
            ])
          : pending,
      );
      pending = Buffer.alloc(0);
    });
    client.on("data", (c: Buffer) => {
      if (!upstream.write(c)) {
        client.pause();
        upstream.once("drain", () => client.resume());
      }
    });
    const closed = (by: "client" | "upstream") => () => {
      if (by === "client" && !answered) return finish({ kind: "aborted" });
      finish({ kind: "done", outcome: outcome(by) });
    };
    upstream.on("close", closed("upstream"));
    upstream.on("end", closed("upstream"));
    upstream.on("error", () => {});
    client.on("close", closed("client"));
    client.on("end", closed("client"));
    upstream.write(requestHead);
    if (head.length > 0) upstream.write(head);
  });
}
