// The audit trail's side in the token hook: every route whose declaration
// names an audit action (`config.access.audit`) is a change, and as its
// answer is sent the change is handed to the recorder with who made it
// (the token), from where (client IP, user agent) and how it ended. Done
// here, once, rather than in each route, so no change route can forget it.

import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Principal } from "../store/index.ts";

/** One change made through the API, as the token hook saw it. */
export interface Change {
  principal: Principal;
  /** The route's declared action (deployment.delete, secret.update, ...). */
  action: string;
  method: string;
  /** The route's pattern, e.g. /api/v1/deployment/:ws/:id. */
  route: string;
  /**
   * What the change was about: the route's last path parameter, else the
   * body's name, else another workspace the route names (a cluster admin's
   * change to another workspace, recorded in its own); null when none.
   */
  objectId: string | null;
  clientIp: string;
  userAgent: string;
  status: number;
  /** ok, denied (401/403, permission_denied) or failed (another error; the gateway's ok:false too). */
  outcome: "ok" | "denied" | "failed";
  /** The error's code when it failed (not_found, conflict, ...). */
  errorCode: string | null;
  at: string;
}

/** Where changes go (the workspaces area's audit trail). Never rejects: a failure is the recorder's to log. */
export interface ChangeRecorder {
  record(change: Change): Promise<void>;
}

function objectIdOf(req: FastifyRequest, principal: Principal): string | null {
  const all = (req.params ?? {}) as Record<string, string>;
  const params = Object.entries(all).filter(([k]) => k !== "ws");
  const last = params[params.length - 1];
  if (last) return String(last[1]);
  const body = req.body as { name?: unknown; deployment?: unknown } | undefined;
  if (body && typeof body === "object") {
    if (typeof body.name === "string") return body.name;
    if (typeof body.deployment === "string") return body.deployment;
  }
  // A cluster admin's change to another workspace is recorded in its own
  // workspace's trail: without this it would not say which workspace it changed.
  return typeof all.ws === "string" && all.ws !== principal.workspace.externalId ? all.ws : null;
}

function outcomeOf(status: number, errorCode: string | undefined): Change["outcome"] {
  if (
    errorCode === "permission_denied" ||
    errorCode === "unauthenticated" ||
    status === 401 ||
    status === 403
  )
    return "denied";
  return status < 400 && errorCode === undefined ? "ok" : "failed";
}

/**
 * Installs the recording hook on a token scope: in onSend, once the answer
 * is known and before it leaves, so that a client that got its answer finds
 * its change in the trail (and a coordinator that stops right after it has
 * still recorded it).
 */
export function recordChanges(scope: FastifyInstance, recorder: ChangeRecorder): void {
  scope.addHook("onSend", async (req: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const action = req.routeOptions.config.access?.audit;
    if (!action || !req.principal) return payload;
    let errorCode: string | undefined;
    // An error's body, or the SDK gateway's failure (200 with ok:false).
    if (typeof payload === "string" && (reply.statusCode >= 400 || payload.startsWith('{"ok":false'))) {
      try {
        const body = JSON.parse(payload) as { error?: { code?: unknown } };
        if (typeof body.error?.code === "string") errorCode = body.error.code;
      } catch {}
    }
    await recorder.record({
      principal: req.principal,
      action,
      method: req.method,
      route: req.routeOptions.url ?? req.url.split("?")[0] ?? "",
      objectId: objectIdOf(req, req.principal),
      clientIp: req.ip,
      userAgent: String(req.headers["user-agent"] ?? ""),
      status: reply.statusCode,
      outcome: outcomeOf(reply.statusCode, errorCode),
      errorCode: errorCode ?? null,
      at: new Date().toISOString(),
    });
    return payload;
  });
}
