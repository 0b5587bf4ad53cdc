// `GET /api/v1/container/{ws}/{container_id}/shell` (docs/sandboxes.md,
// Shell): a websocket carrying a tty exec on the container's agent. Binary
// frames are terminal bytes both ways; text frames are JSON: the client's
// `{"type":"resize","cols","rows"}` and the server's `{"type":"exit","code"}`.
// The exec starts before the upgrade is answered, so an unknown container or
// a failed exec is a plain HTTP error. The websocket itself is the `ws`
// package's; the handshake is checked here first so that a malformed one is
// refused in berth's error shape too.

import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "pino";
import { type WebSocket, WebSocketServer } from "ws";
import type { ContainerApi, ExecSession } from "../../api/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { managedShellTargets, type ShellTarget, type ShellTargets } from "../containers/index.ts";
import { bearerToken, checkAccess } from "../http/index.ts";
import { publicError } from "../http/index.ts";
import {
  type AreaRoutes,
  addUpgradeRoute,
  decodePathSegment,
  type RawRoute,
  refuseUpgrade,
} from "../http/index.ts";
import type { Principal, TokenRepo } from "../store/index.ts";

// Re-exported for the composition root and tests: the targets are defined beside their sources.
export { managedShellTargets, type ShellTarget, type ShellTargets };

export interface ShellDeps {
  tokens: TokenRepo;
  /** Asked in order; the first that knows the container answers. */
  targets: ShellTargets[];
  agents: { client(agentId: string): Pick<ContainerApi, "exec"> };
  log: Logger;
}

const SHELL_PATH = /^\/api\/v1\/container\/([^/?]+)\/([^/?]+)\/shell(?:\?(.*))?$/;
/** bash when the image has it, else sh. */
export const SHELL_ARGS = ["/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash; fi; exec /bin/sh"];
const MAX_TERMINAL_SIDE = 10_000;
/** Largest message taken; a terminal never sends one near it. */
export const SHELL_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** What `ws` takes as a Sec-WebSocket-Key (16 bytes, base64). */
const WEBSOCKET_KEY = /^[+/0-9A-Za-z]{22}==$/;

/** The shell's raw route (coordinator/http/raw-routes.ts): its websocket upgrades. */
export function shellRoute(deps: ShellDeps): RawRoute {
  // No permessage-deflate (never accepted), and no set of clients kept: each session ends itself.
  const wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    clientTracking: false,
    maxPayload: SHELL_MAX_MESSAGE_BYTES,
  });
  return {
    name: "shell",
    takeUpgrade(req, socket, head) {
      const m = SHELL_PATH.exec(req.url ?? "");
      if (!m) return false;
      void serveShell(deps, wss, req, socket, head, m).catch((e) => {
        refuseUpgrade(socket, e, { log: deps.log, what: "shell session failed" });
      });
      return true;
    },
    close: () => wss.close(),
  };
}

/** Serves shell upgrades on `server`, through its raw route table. Returns a detach. */
export function attachShellUpgrades(server: Server, deps: ShellDeps): () => void {
  return addUpgradeRoute(server, shellRoute(deps));
}

/** Whether `ws` will take the handshake (it answers a bad one itself, in plain text). */
function isWebsocketHandshake(req: IncomingMessage): boolean {
  const version = Number(req.headers["sec-websocket-version"]);
  return (
    req.method === "GET" &&
    String(req.headers.upgrade).toLowerCase() === "websocket" &&
    WEBSOCKET_KEY.test(String(req.headers["sec-websocket-key"] ?? "")) &&
    (version === 13 || version === 8)
  );
}

async function serveShell(
  deps: ShellDeps,
  wss: WebSocketServer,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  m: RegExpExecArray,
): Promise<void> {
  const ws = decodePathSegment(m[1] as string);
  const containerId = decodePathSegment(m[2] as string);
  let session: ExecSession;
  try {
    const p = await principal(deps.tokens, req.headers.authorization);
    if (ws !== p.workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
    let target: ShellTarget | undefined;
    for (const t of deps.targets) {
      target = await t.find(containerId);
      if (target) break;
    }
    // Another workspace's container reads as missing.
    if (!target || target.workspaceId !== p.workspace.id)
      throw new BerthError("not_found", `container ${containerId} not found or not running`);
    if (!isWebsocketHandshake(req))
      throw new BerthError(
        "invalid_request",
        "this route takes a websocket (GET with Upgrade: websocket, Sec-WebSocket-Version: 13)",
      );
    session = await deps.agents.client(target.agentId).exec(containerId, {
      args: SHELL_ARGS,
      tty: true,
      env: { TERM: "xterm-256color" },
    });
  } catch (e) {
    // An internal error is logged by the edge, with the id its answer carries.
    const pe = refuseUpgrade(socket, e, {
      log: deps.log,
      what: "cannot start a shell",
      context: { containerId },
    });
    if (pe.status >= 500 && !pe.errorId)
      deps.log.warn({ err: describeError(e), containerId }, "cannot start a shell");
    return;
  }
  const size = new URLSearchParams(m[3] ?? "");
  resize(session, Number(size.get("cols")), Number(size.get("rows")));
  // The peer may have gone while the exec started: `ws` upgrades no such socket, and the shell goes.
  if (socket.destroyed || !socket.readable || !socket.writable) {
    session.kill("SIGKILL");
    return;
  }
  wss.handleUpgrade(req, socket, head, (conn) => pipeSession(session, conn, deps.log, containerId));
}

async function principal(tokens: TokenRepo, authorization: string | undefined): Promise<Principal> {
  const p = await tokens.authenticate(bearerToken(authorization));
  if (!p) throw new BerthError("unauthenticated", "unknown or revoked token");
  // A shell runs commands in the container: what a developer may do (docs/roles.md).
  checkAccess(p, { needs: "write" });
  return p;
}

function resize(session: ExecSession, cols: number, rows: number): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= MAX_TERMINAL_SIDE;
  if (ok(cols) && ok(rows)) session.resize?.(cols, rows);
}

function pipeSession(session: ExecSession, ws: WebSocket, log: Logger, containerId: string): void {
  let exited = false;
  ws.on("message", (raw, binary) => {
    // binaryType is "nodebuffer": every message is one Buffer.
    const data = raw as Buffer;
    if (binary) {
      if (!exited) session.writeStdin(data);
      return;
    }
    let msg: { type?: unknown; cols?: unknown; rows?: unknown };
    try {
      msg = JSON.parse(data.toString("utf8")) as typeof msg;
    } catch {
      return;
    }
    if (msg?.type === "resize") resize(session, Number(msg.cols), Number(msg.rows));
  });
  // A protocol error or a reset: `ws` closes the connection and says "close" next.
  ws.on("error", () => {});
  // The terminal went away: the shell goes too (a tty's hangup).
  ws.on("close", () => {
    if (!exited) session.kill("SIGKILL");
  });
  void (async () => {
    try {
      for await (const out of session.output) ws.send(out.data, { binary: true });
      const code = await session.exit;
      exited = true;
      ws.send(JSON.stringify({ type: "exit", code }), { binary: false });
      ws.close(1000);
    } catch (e) {
      exited = true;
      // The frame's message is the edge's: an internal error's text stays in the log, under the id it names.
      const { error, errorId } = publicError(e, {
        log,
        what: "shell exec ended with an error",
        context: { containerId },
      });
      if (!errorId) log.warn({ err: describeError(e), containerId }, "shell exec ended with an error");
      ws.send(JSON.stringify({ type: "error", message: error.message }), { binary: false });
      ws.close(1011, "exec failed");
    }
  })();
}

/** The shell's websocket as the edge's own routes (served before Fastify). */
export function shellHttpRoutes(deps: ShellDeps): AreaRoutes {
  return { raw: [shellRoute(deps)] };
}
