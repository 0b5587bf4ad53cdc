// `GET /api/v1/container/{ws}/{container_id}/shell` (docs/sandboxes.md,
// Shell): a websocket carrying a tty exec on the container's agent. Binary
// frames are terminal bytes both ways; text frames are JSON: the client's
// `{"type":"resize","cols","rows"}` and the server's `{"type":"exit","code"}`.
// The exec starts before the upgrade is answered, so an unknown container or
// a failed exec is a plain HTTP error.

import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "pino";
import type { ContainerApi, ExecSession } from "../../../agent/rpc/container-api.ts";
import { BerthError, describeError, isBerthError } from "../../../shared/errors.ts";
import type { ManagedContainerInfo } from "../../containers/types.ts";
import { answerOnSocket, claimUpgrade } from "../../endpoints/websocket.ts";
import type { Principal, TokenRepo } from "../../store/workspaces.ts";
import { bearerToken } from "../auth.ts";
import { HTTP_STATUS } from "../errors.ts";
import { acceptKey, FrameSocket } from "./shell-socket.ts";

/** A running container a shell may open in. */
export interface ShellTarget {
  agentId: string;
  workspaceId: string;
}

/** Where containers are looked up: the container manager's, sandboxes and pods. */
export interface ShellTargets {
  find(containerId: string): Promise<ShellTarget | undefined>;
}

/** The container manager's running containers (functions, deployments, pods). */
export function managedShellTargets(manager: { list(): ManagedContainerInfo[] }): ShellTargets {
  return {
    async find(containerId) {
      const c = manager.list().find((x) => x.id === containerId && x.state === "running");
      return c ? { agentId: c.agentId, workspaceId: c.workspaceId } : undefined;
    },
  };
}

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

class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const refusalOf = (e: unknown): Refusal => {
  if (e instanceof Refusal) return e;
  if (isBerthError(e))
    return new Refusal(HTTP_STATUS[e.kind], e.code, e.kind === "Internal" ? "internal error" : e.message);
  return new Refusal(500, "internal", "internal error");
};

/** Serves shell upgrades on `server`; other upgrades are left to other listeners. Returns a detach. */
export function attachShellUpgrades(server: Server, deps: ShellDeps): () => void {
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const m = SHELL_PATH.exec(req.url ?? "");
    if (!m) return;
    claimUpgrade(server, req);
    socket.on("error", () => {});
    void serveShell(deps, req, socket, head, m).catch((e) => {
      deps.log.error({ err: describeError(e) }, "shell session failed");
      answerOnSocket(socket, 500, { error: { code: "internal", message: "internal error" } });
    });
  };
  server.on("upgrade", onUpgrade);
  return () => server.off("upgrade", onUpgrade);
}

const decode = (s: string) => {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
};

async function serveShell(
  deps: ShellDeps,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  m: RegExpExecArray,
): Promise<void> {
  const ws = decode(m[1] as string);
  const containerId = decode(m[2] as string);
  let session: ExecSession;
  try {
    const p = await principal(deps.tokens, req.headers.authorization);
    if (ws !== p.workspace.externalId) throw new Refusal(404, "not_found", `workspace ${ws} not found`);
    let target: ShellTarget | undefined;
    for (const t of deps.targets) {
      target = await t.find(containerId);
      if (target) break;
    }
    // Another workspace's container reads as missing.
    if (!target || target.workspaceId !== p.workspace.id)
      throw new Refusal(404, "not_found", `container ${containerId} not found or not running`);
    if (String(req.headers.upgrade).toLowerCase() !== "websocket" || !req.headers["sec-websocket-key"])
      throw new Refusal(400, "invalid_request", "this route takes a websocket (Upgrade: websocket)");
    session = await deps.agents.client(target.agentId).exec(containerId, {
      args: SHELL_ARGS,
      tty: true,
      env: { TERM: "xterm-256color" },
    });
  } catch (e) {
    const r = refusalOf(e);
    if (r.status >= 500 && !(e instanceof Refusal))
      deps.log.warn({ err: describeError(e), containerId }, "cannot start a shell");
    return answerOnSocket(socket, r.status, { error: { code: r.code, message: r.message } });
  }
  const size = new URLSearchParams(m[3] ?? "");
  resize(session, Number(size.get("cols")), Number(size.get("rows")));
  socket.write(
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
      `Sec-WebSocket-Accept: ${acceptKey(String(req.headers["sec-websocket-key"]))}\r\n\r\n`,
  );
  pipeSession(session, new FrameSocketBox(socket, head), deps.log, containerId);
}

async function principal(tokens: TokenRepo, authorization: string | undefined): Promise<Principal> {
  const p = await tokens.authenticate(bearerToken(authorization));
  if (!p) throw new BerthError("unauthenticated", "unknown or revoked token");
  return p;
}

function resize(session: ExecSession, cols: number, rows: number): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= MAX_TERMINAL_SIDE;
  if (ok(cols) && ok(rows)) session.resize?.(cols, rows);
}

/** The websocket with its handlers set once the session is known. */
class FrameSocketBox {
  onMessage: (data: Buffer, binary: boolean) => void = () => {};
  onClose: () => void = () => {};
  readonly ws: FrameSocket;

  constructor(socket: Duplex, head: Buffer) {
    this.ws = new FrameSocket(
      socket,
      "server",
      { message: (d, b) => this.onMessage(d, b), close: () => this.onClose() },
      head,
    );
  }
}

function pipeSession(session: ExecSession, box: FrameSocketBox, log: Logger, containerId: string): void {
  const { ws } = box;
  let exited = false;
  box.onMessage = (data, binary) => {
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
  };
  // The terminal went away: the shell goes too (a tty's hangup).
  box.onClose = () => {
    if (!exited) session.kill("SIGKILL");
  };
  void (async () => {
    try {
      for await (const out of session.output) ws.sendBinary(out.data);
      const code = await session.exit;
      exited = true;
      ws.sendText(JSON.stringify({ type: "exit", code }));
      ws.close(1000);
    } catch (e) {
      exited = true;
      log.warn({ err: describeError(e), containerId }, "shell exec ended with an error");
      ws.sendText(JSON.stringify({ type: "error", message: describeError(e) }));
      ws.close(1011, "exec failed");
    }
  })();
}
