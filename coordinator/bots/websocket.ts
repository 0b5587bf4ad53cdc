// A bot session over a websocket (docs/bots.md, "Sessions"):
//
//   ws://{coordinator}/bot/{name}/session[?session_id=bs-...]      the token's workspace
//   ws://{coordinator}/bot/id/{deployment_id}/session[?session_id=] by deployment (no token
//                                                                    when authorized=False)
//
// Without session_id a new session opens; with one the session resumes as the
// store has it (after a coordinator restart too). The server sends
// `{"type":"session","session":{...}}` first, then the session's events
// (`markers` in exposed locations, `transition` started/finished/failed);
// the client sends `{"type":"push","location","markers":[...]}`. A bad
// message is answered `{"type":"error","code","message"}` and the session
// stays open. Refusals before the upgrade are plain HTTP errors in berth's
// shape (401, 404 for another workspace's bot or session).

import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "pino";
import { type RawData, type WebSocket, WebSocketServer } from "ws";
import { BerthError, describeError } from "../../shared/errors.ts";
import { bearerToken, checkAccess } from "../http/index.ts";
import { publicError } from "../http/index.ts";
import { addUpgradeRoute, decodePathSegment, type RawRoute, refuseUpgrade } from "../http/index.ts";
import type { Principal } from "../store/index.ts";
import type { DeployedBots } from "./directory.ts";
import type { BotEngine, BotSessionMessage } from "./engine.ts";

export interface BotSocketDeps {
  engine: BotEngine;
  bots: Pick<DeployedBots, "byName" | "byId">;
  tokens: { authenticate(secret: string): Promise<Principal | undefined> };
  log: Logger;
}

const SESSION_PATH = /^\/bot\/(?:(id)\/)?([^/?]+)(?:\/v(\d+))?\/session\/?(?:\?(.*))?$/;
/** A push carries at most this much JSON. */
export const BOT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024;

/** Bot sessions' raw route (coordinator/http/raw-routes.ts): their websocket upgrades. */
export function botSessionRoute(deps: BotSocketDeps): RawRoute {
  const wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    clientTracking: false,
    maxPayload: BOT_MAX_MESSAGE_BYTES,
  });
  return {
    name: "bots",
    takeUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
      const m = SESSION_PATH.exec(req.url ?? "");
      if (!m) return false;
      void open(deps, req, m)
        .then((s) => {
          if (socket.destroyed) return;
          wss.handleUpgrade(req, socket, head, (conn) => serve(deps, conn, s.workspaceId, s.sessionId));
        })
        .catch((e) => refuseUpgrade(socket, e, { log: deps.log, what: "bot session failed" }));
      return true;
    },
    close: () => wss.close(),
  };
}

/** Serves bot session upgrades on `server`, through its raw route table. Returns a detach. */
export function attachBotUpgrades(server: Server, deps: BotSocketDeps): () => void {
  return addUpgradeRoute(server, botSessionRoute(deps));
}

/** Who asks for which bot, and the session (new or resumed); refusals throw before the upgrade. */
async function open(
  deps: BotSocketDeps,
  req: IncomingMessage,
  m: RegExpExecArray,
): Promise<{ workspaceId: string; sessionId: string }> {
  if (String(req.headers.upgrade).toLowerCase() !== "websocket")
    throw new BerthError("invalid_request", "a bot session is a websocket (GET with Upgrade: websocket)");
  const byId = m[1] === "id";
  const which = decodePathSegment(m[2] as string);
  const version = m[3] ? Number(m[3]) : undefined;
  const query = new URLSearchParams(m[4] ?? "");
  const principal = req.headers.authorization
    ? await deps.tokens.authenticate(bearerToken(req.headers.authorization))
    : undefined;
  if (req.headers.authorization && !principal)
    throw new BerthError("unauthenticated", "unknown or revoked token");
  if (principal) checkAccess(principal, { needs: "invoke" });
  let workspaceId: string;
  let botName: string;
  if (byId) {
    const bot = await deps.bots.byId(which);
    // Another workspace's bot that needs a token reads as missing.
    if (bot.authorized && !principal)
      throw new BerthError(
        "unauthenticated",
        "this bot needs 'Authorization: Bearer <token>' of its workspace",
      );
    if (bot.authorized && principal?.workspace.id !== bot.workspaceId)
      throw new BerthError("not_found", `deployment ${which} not found`);
    workspaceId = bot.workspaceId;
    botName = bot.name;
  } else {
    if (!principal)
      throw new BerthError(
        "unauthenticated",
        "/bot/{name}/session needs 'Authorization: Bearer <token>'; a bot deployed with authorized=False also answers at /bot/id/{deployment_id}/session",
      );
    workspaceId = principal.workspace.id;
    botName = (await deps.bots.byName(workspaceId, which, version)).name;
  }
  const resume = query.get("session_id");
  if (resume) {
    const s = await deps.engine.get(workspaceId, resume);
    if (s.botName !== botName) throw new BerthError("not_found", `bot session ${resume} not found`);
    return { workspaceId, sessionId: s.id };
  }
  return { workspaceId, sessionId: (await deps.engine.create(workspaceId, botName)).id };
}

function serve(deps: BotSocketDeps, conn: WebSocket, workspaceId: string, sessionId: string): void {
  const send = (m: unknown) => {
    if (conn.readyState === conn.OPEN) conn.send(JSON.stringify(m));
  };
  const sendError = (e: unknown) => {
    const pe = publicError(e, { log: deps.log, what: "bot session message failed" });
    send({ type: "error", code: pe.error.code, message: pe.error.message });
  };
  // Subscribed before the snapshot is read: an event between the two arrives (the version tells it apart).
  const unsubscribe = deps.engine.subscribe(sessionId, (m: BotSessionMessage) => send(m));
  conn.on("close", unsubscribe);
  conn.on("error", () => {});
  // One message at a time, in order.
  let queue = Promise.resolve();
  conn.on("message", (data: RawData, isBinary: boolean) => {
    queue = queue.then(async () => {
      try {
        await handle(deps, workspaceId, sessionId, data, isBinary);
      } catch (e) {
        sendError(e);
      }
    });
  });
  deps.engine
    .view(workspaceId, sessionId)
    .then((session) => send({ type: "session", session }))
    .catch((e) => {
      sendError(e);
      deps.log.warn({ sessionId, err: describeError(e) }, "bots: cannot read the session");
    });
}

async function handle(
  deps: BotSocketDeps,
  workspaceId: string,
  sessionId: string,
  data: RawData,
  isBinary: boolean,
): Promise<void> {
  if (isBinary) throw new BerthError("invalid_request", 'send text frames of JSON: {"type":"push",...}');
  let msg: unknown;
  try {
    msg = JSON.parse(data.toString());
  } catch (e) {
    throw new BerthError("invalid_json", `the message is not JSON: ${(e as Error).message}`);
  }
  const m = msg as { type?: unknown; location?: unknown; markers?: unknown };
  if (!m || typeof m !== "object" || m.type !== "push")
    throw new BerthError("invalid_request", 'messages are {"type":"push","location":NAME,"markers":[{...}]}');
  if (typeof m.location !== "string" || !Array.isArray(m.markers))
    throw new BerthError(
      "invalid_request",
      "a push needs location (a marker type name) and markers (a list)",
    );
  await deps.engine.push(workspaceId, sessionId, m.location, m.markers, { userFacing: true });
}
