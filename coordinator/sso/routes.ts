// The single sign-on routes (docs/sso.md). Public: what `berth login` needs to
// know of the provider, the ID token exchange, and the dashboard's browser
// flow (/auth/login, /auth/callback, /auth/logout). Token-scoped: listing and
// revoking sessions.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { BerthError, isBerthError } from "../../shared/errors.ts";
import {
  CSRF_HEADER,
  ErrorResponse,
  ROLES,
  SESSION_COOKIE,
  principalOf,
  requestCookies,
  roleHas,
  setCookie,
} from "../http/index.ts";
import type { TokenRecord, TokenRepo } from "../store/index.ts";
import type { ResolvedOidcOptions } from "./options.ts";
import type { IdentityProvider, PendingLogin } from "./provider.ts";
import type { SessionService, SignInOrigin } from "./sessions.ts";

/** The cookie that carries a dashboard login under way (state, nonce, PKCE verifier) to the callback. */
const LOGIN_COOKIE = "berth_oidc_login";
const LOGIN_COOKIE_PATH = "/auth/callback";
const LOGIN_TTL_S = 600;

export const SessionBody = Type.Object({
  id: Type.String(),
  name: Type.String({ description: "sso:<the user's email, username or subject>" }),
  subject: Type.String({ description: "the OpenID provider's subject (sub) of the user" }),
  role: Type.Union(ROLES.map((r) => Type.Literal(r))),
  created_at: Type.String(),
  expires_at: Type.String(),
  last_used_at: Type.Union([Type.String(), Type.Null()]),
  revoked_at: Type.Union([Type.String(), Type.Null()]),
});

export const sessionJson = (t: TokenRecord) => ({
  id: t.id,
  name: t.name,
  subject: t.subject ?? "",
  role: t.role,
  created_at: t.createdAt,
  expires_at: t.expiresAt ?? "",
  last_used_at: t.lastUsedAt,
  revoked_at: t.revokedAt,
});

const WorkspaceRef = Type.Object({ external_id: Type.String(), name: Type.String() });

const errors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse };

export interface SsoDeps {
  /** Absent when the coordinator config has no `oidc`: the routes then say single sign-on is off. */
  sso?: { options: ResolvedOidcOptions; provider: IdentityProvider; sessions: SessionService };
  tokens: TokenRepo;
}

function configured(d: SsoDeps): NonNullable<SsoDeps["sso"]> {
  if (!d.sso) {
    throw new BerthError(
      "not_found",
      "single sign-on is not configured on this coordinator (the config's oidc section; docs/sso.md)",
    );
  }
  return d.sso;
}

const originOf = (req: FastifyRequest, route: string): SignInOrigin => ({
  clientIp: req.ip,
  userAgent: String(req.headers["user-agent"] ?? ""),
  route,
});

/** Secure cookies when the browser reached us over TLS (directly, or the public URL says https). */
function secure(req: FastifyRequest, o: ResolvedOidcOptions): boolean {
  return req.protocol === "https" || o.redirectUrl.protocol === "https:";
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A failed browser login: a page that says why, and the way back. */
function loginFailed(reply: FastifyReply, status: number, message: string): string {
  reply
    .status(status)
    .type("text/html; charset=utf-8")
    .header("content-security-policy", "default-src 'none'")
    .header("cache-control", "no-store");
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>berth: sign-in failed</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto">
<h1>Sign-in failed</h1>
<p role="alert" data-testid="sso-error">${escapeHtml(message)}</p>
<p><a href="/">Back to the dashboard</a></p>
</body></html>
`;
}

function readPending(req: FastifyRequest): PendingLogin | undefined {
  const raw = requestCookies(req.headers.cookie).get(LOGIN_COOKIE);
  if (!raw) return undefined;
  try {
    const v = JSON.parse(Buffer.from(raw, "base64url").toString("utf8")) as PendingLogin;
    return typeof v.state === "string" && typeof v.nonce === "string" && typeof v.verifier === "string"
      ? v
      : undefined;
  } catch {
    return undefined;
  }
}

/** The public single sign-on routes: no token (the login makes one). */
export function ssoPublicRoutes(d: SsoDeps): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/auth/config",
      {
        schema: {
          tags: ["auth"],
          // Public: no token (the OpenAPI document says so).
          security: [],
          summary: "Whether single sign-on is on, and the provider, client and scopes `berth login` uses",
          description: "What `berth login` needs to sign in at the OpenID provider (device flow)",
          response: {
            200: Type.Object({
              enabled: Type.Boolean(),
              issuer: Type.Optional(Type.String()),
              client_id: Type.Optional(Type.String({ description: "the client of the device flow" })),
              scopes: Type.Optional(Type.Array(Type.String())),
            }),
          },
        },
      },
      async () => {
        if (!d.sso) return { enabled: false };
        const o = d.sso.options;
        return { enabled: true, issuer: o.issuer.href, client_id: o.cliClientId, scopes: o.scopes };
      },
    );

    app.post(
      "/api/v1/auth/session",
      {
        schema: {
          tags: ["auth"],
          // Public: no token (the OpenAPI document says so).
          security: [],
          summary:
            "Exchanges an OpenID provider's ID token for a session token; answers it and its workspace",
          description:
            "Exchanges an ID token of the OpenID provider for a berth session in the workspace the user's groups map to",
          body: Type.Object(
            {
              id_token: Type.String({ minLength: 1, maxLength: 16384 }),
              access_token: Type.Optional(
                Type.String({
                  maxLength: 16384,
                  description: "to read groups from userinfo when the ID token has none",
                }),
              ),
              workspace: Type.Optional(
                Type.String({
                  maxLength: 100,
                  description: "the workspace (name or id); default the first mapped",
                }),
              ),
            },
            { additionalProperties: false },
          ),
          response: {
            201: Type.Object({ token: Type.String(), session: SessionBody, workspace: WorkspaceRef }),
            ...errors,
          },
        },
      },
      async (req, reply) => {
        const sso = configured(d);
        const body = req.body as { id_token: string; access_token?: string; workspace?: string };
        const who = await sso.provider.verifyIdToken(body.id_token, body.access_token);
        const made = await sso.sessions.signIn(who, {
          ...(body.workspace ? { workspace: body.workspace } : {}),
          origin: originOf(req, "/api/v1/auth/session"),
        });
        reply.status(201);
        return {
          token: made.secret,
          session: sessionJson(made.session),
          workspace: { external_id: made.workspace.externalId, name: made.workspace.name },
        };
      },
    );

    app.get(
      "/auth/login",
      {
        schema: {
          hide: true,
          querystring: Type.Object({ workspace: Type.Optional(Type.String({ maxLength: 100 })) }),
        },
      },
      async (req, reply) => {
        const sso = configured(d);
        const { workspace } = req.query as { workspace?: string };
        const { url, pending } = await sso.provider.beginLogin(workspace);
        const value = Buffer.from(JSON.stringify(pending)).toString("base64url");
        reply.header(
          "set-cookie",
          setCookie(LOGIN_COOKIE, value, {
            maxAgeSeconds: LOGIN_TTL_S,
            path: LOGIN_COOKIE_PATH,
            secure: secure(req, sso.options),
          }),
        );
        reply.header("cache-control", "no-store");
        return reply.redirect(url.href, 302);
      },
    );

    app.get("/auth/callback", { schema: { hide: true } }, async (req, reply) => {
      const sso = configured(d);
      const clear = setCookie(LOGIN_COOKIE, "", {
        maxAgeSeconds: 0,
        path: LOGIN_COOKIE_PATH,
        secure: secure(req, sso.options),
      });
      reply.header("set-cookie", clear);
      const query = req.url.includes("?") ? req.url.slice(req.url.indexOf("?")) : "";
      const params = new URLSearchParams(query);
      if (params.get("error")) {
        return loginFailed(
          reply,
          401,
          `the OpenID provider refused the sign-in: ${params.get("error")}${params.get("error_description") ? `: ${params.get("error_description")}` : ""}`,
        );
      }
      const pending = readPending(req);
      if (!pending) {
        return loginFailed(
          reply,
          400,
          "this sign-in was not started here, or took longer than 10 minutes: start again",
        );
      }
      try {
        const who = await sso.provider.finishLogin(query, pending);
        const made = await sso.sessions.signIn(who, {
          ...(pending.workspace ? { workspace: pending.workspace } : {}),
          origin: originOf(req, "/auth/callback"),
        });
        const maxAge = (Date.parse(made.session.expiresAt ?? "") - Date.now()) / 1000;
        reply.header("set-cookie", [
          clear,
          setCookie(SESSION_COOKIE, made.secret, { maxAgeSeconds: maxAge, secure: secure(req, sso.options) }),
        ]);
        reply.header("cache-control", "no-store");
        return reply.redirect("/", 302);
      } catch (e) {
        if (!isBerthError(e)) throw e;
        const status = e.code === "permission_denied" ? 403 : e.code === "unavailable" ? 503 : 401;
        return loginFailed(reply, status, e.message);
      }
    });

    app.post("/auth/logout", { schema: { hide: true } }, async (req, reply) => {
      const secret = requestCookies(req.headers.cookie).get(SESSION_COOKIE);
      if (secret) {
        if (req.headers[CSRF_HEADER] === undefined) {
          throw new BerthError(
            "permission_denied",
            `signing out needs the ${CSRF_HEADER} header (the dashboard sends it)`,
          );
        }
        const p = await d.tokens.authenticate(secret);
        if (p?.token.kind === "session") await d.tokens.revokeSession(p.workspace.id, p.token.id);
      }
      reply.header(
        "set-cookie",
        setCookie(SESSION_COOKIE, "", { maxAgeSeconds: 0, secure: req.protocol === "https" }),
      );
      reply.status(204);
      return reply.send();
    });
  };
}

/** The workspace's sessions: listed by admins; revoked by their own user or an admin. */
export function sessionRoutes(d: SsoDeps): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/session",
      {
        config: { access: { needs: "manage" } },
        schema: {
          summary:
            "The workspace's single sign-on sessions that are live (with all, expired and revoked ones too)",
          querystring: Type.Object({
            all: Type.Optional(Type.Boolean({ description: "expired and revoked ones too" })),
          }),
          response: { 200: Type.Object({ sessions: Type.Array(SessionBody) }), ...errors },
        },
      },
      async (req) => {
        const { all } = req.query as { all?: boolean };
        const now = new Date().toISOString();
        const list = await d.tokens.list(principalOf(req).workspace.id, { kind: "session" });
        return {
          sessions: list
            .filter((s) => all || (s.revokedAt === null && (s.expiresAt ?? "") > now))
            .map(sessionJson),
        };
      },
    );

    app.get(
      "/api/v1/session/current",
      {
        config: { access: { needs: "token" } },
        schema: {
          summary: "The session of the calling credential (not_found for an API token)",
          response: { 200: Type.Object({ session: SessionBody }), ...errors },
        },
      },
      async (req) => {
        const p = principalOf(req);
        if (p.token.kind !== "session") {
          throw new BerthError("not_found", "this credential is an API token, not a single sign-on session");
        }
        return { session: sessionJson(p.token) };
      },
    );

    app.delete(
      "/api/v1/session/:sessionId",
      {
        config: { access: { needs: "token", audit: "session.revoke" } },
        schema: {
          summary: "Revokes a single sign-on session of the workspace; answers it",
          params: Type.Object({ sessionId: Type.String() }),
          response: { 200: Type.Object({ session: SessionBody }), ...errors },
        },
      },
      async (req) => {
        const p = principalOf(req);
        const { sessionId } = req.params as { sessionId: string };
        const s = await d.tokens.session(p.workspace.id, sessionId);
        if (s.id !== p.token.id && !roleHas(p.token, "manage")) {
          throw new BerthError(
            "permission_denied",
            `session ${sessionId} is another user's: only an admin token revokes it (this token's role is ${p.token.role})`,
          );
        }
        return { session: sessionJson(await d.tokens.revokeSession(p.workspace.id, sessionId)) };
      },
    );
  };
}
