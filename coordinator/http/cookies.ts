// Cookies of the dashboard's single sign-on session (docs/sso.md): the token
// hook reads the session from one when a request has no Authorization header.

import type { FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";

/** The cookie that holds a dashboard's single sign-on session (HttpOnly, SameSite=Lax). */
export const SESSION_COOKIE = "berth_session";

/**
 * The header the dashboard's scripts send on every API call. A request that
 * authenticates by the session cookie and changes something must carry it:
 * a page of another site cannot set a custom header on a cross-origin request
 * without a CORS preflight, which this API never answers yes to.
 */
export const CSRF_HEADER = "x-berth-csrf";

/** The cookies of a request, by name (the first of a repeated name wins). */
export function requestCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    if (!name || out.has(name)) continue;
    let value = part.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    try {
      out.set(name, decodeURIComponent(value));
    } catch {
      out.set(name, value);
    }
  }
  return out;
}

/** A `Set-Cookie` value: HttpOnly always; Secure when the page is served over TLS. */
export function setCookie(
  name: string,
  value: string,
  o: { maxAgeSeconds: number; path?: string; secure: boolean; sameSite?: "Lax" | "Strict" },
): string {
  return [
    `${name}=${encodeURIComponent(value)}`,
    `Path=${o.path ?? "/"}`,
    `Max-Age=${Math.max(0, Math.floor(o.maxAgeSeconds))}`,
    "HttpOnly",
    `SameSite=${o.sameSite ?? "Lax"}`,
    ...(o.secure ? ["Secure"] : []),
  ].join("; ");
}

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * The credential of a request: `Authorization: Bearer T`, else the session
 * cookie (then a change needs the CSRF header); neither is unauthenticated.
 */
export function requestCredential(req: Pick<FastifyRequest, "headers" | "method">): {
  secret: string;
  from: "header" | "cookie";
} | null {
  if (req.headers.authorization !== undefined) return null;
  const secret = requestCookies(req.headers.cookie).get(SESSION_COOKIE);
  if (!secret) return null;
  if (!SAFE_METHODS.has(req.method) && req.headers[CSRF_HEADER] === undefined) {
    throw new BerthError(
      "permission_denied",
      `a change made with the dashboard's session cookie needs the ${CSRF_HEADER} header (the dashboard sends it)`,
    );
  }
  return { secret, from: "cookie" };
}
