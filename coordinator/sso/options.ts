// The operator's single sign-on settings (the coordinator config's `oidc`,
// docs/sso.md), checked once at start so that a mistake stops the coordinator
// with its cause rather than refusing every login later.

import { BerthError } from "../../shared/errors.ts";
import { isRole } from "../http/index.ts";
import type { Role } from "../store/index.ts";

/** One rule of the group mapping: members of `group` get `role` in `workspace` (its name or id). */
export interface GroupMapping {
  group: string;
  workspace: string;
  role: Role;
}

/** `oidc` in the coordinator's config file. */
export interface OidcOptions {
  /** The OpenID provider's issuer URL (its discovery document is `<issuer>/.well-known/openid-configuration`). */
  issuer: string;
  /** The client the dashboard logs in with (authorization code flow with PKCE). */
  clientId: string;
  /** The client's secret when the provider made it a confidential client. @default none: a public client */
  clientSecret?: string;
  /** The client `berth login` uses (device authorization grant; a public client). @default clientId */
  cliClientId?: string;
  /** Where the provider sends the browser back. @default <publicUrl>/auth/callback */
  redirectUrl?: string;
  /** The scopes asked for. @default ["openid", "profile", "email", "groups"] */
  scopes?: string[];
  /** The ID token (or userinfo) claim that lists the user's groups. @default "groups" */
  groupsClaim?: string;
  /** Which groups get which role in which workspace; a user in none of them is refused. */
  mappings: GroupMapping[];
  /** How long a session is accepted: seconds, or "30m", "12h", "7d". @default 12h */
  sessionTtl?: number | string;
}

export interface ResolvedOidcOptions {
  issuer: URL;
  clientId: string;
  clientSecret?: string;
  cliClientId: string;
  redirectUrl: URL;
  scopes: string[];
  groupsClaim: string;
  mappings: GroupMapping[];
  sessionTtlMs: number;
}

const DEFAULT_TTL_MS = 12 * 3600_000;
const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3600_000, d: 86_400_000 };

function bad(message: string): never {
  throw new BerthError("invalid_request", `coordinator config: oidc.${message}`);
}

/** Plain HTTP is allowed to a provider on this host only (a test's or a developer's). */
export function isLoopback(u: URL): boolean {
  return ["127.0.0.1", "[::1]", "localhost"].includes(u.hostname);
}

function ttlMs(v: number | string | undefined): number {
  if (v === undefined) return DEFAULT_TTL_MS;
  if (typeof v === "number") {
    if (!Number.isFinite(v) || v < 1 || v > 366 * 86_400) bad(`sessionTtl ${v} must be 1..31622400 seconds`);
    return Math.floor(v * 1000);
  }
  const m = /^(\d+)([smhd])$/.exec(v.trim());
  if (!m) bad(`sessionTtl ${JSON.stringify(v)} must be seconds or a duration like "30m", "12h", "7d"`);
  const ms = Number(m[1]) * (UNIT_MS[m[2] as string] as number);
  if (ms < 1000 || ms > 366 * 86_400_000) bad(`sessionTtl ${JSON.stringify(v)} must be within 1s..366d`);
  return ms;
}

function url(name: string, v: unknown): URL {
  if (typeof v !== "string" || !v) bad(`${name} is required: the provider's URL`);
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    bad(`${name} ${JSON.stringify(v)} is not a URL`);
  }
  if (u.protocol !== "https:" && !(u.protocol === "http:" && isLoopback(u))) {
    bad(`${name} ${JSON.stringify(v)} must be https:// (plain http only to 127.0.0.1 or localhost)`);
  }
  return u;
}

export function resolveOidcOptions(o: OidcOptions, publicUrl: string): ResolvedOidcOptions {
  const issuer = url("issuer", o.issuer);
  if (typeof o.clientId !== "string" || !o.clientId) bad("clientId is required");
  if (!Array.isArray(o.mappings) || o.mappings.length === 0) {
    bad("mappings must list at least one {group, workspace, role}: with none, nobody could sign in");
  }
  const mappings = o.mappings.map((m, i) => {
    if (typeof m?.group !== "string" || !m.group) bad(`mappings[${i}].group is required`);
    if (typeof m.workspace !== "string" || !m.workspace) bad(`mappings[${i}].workspace is required`);
    if (typeof m.role !== "string" || !isRole(m.role)) {
      bad(`mappings[${i}].role ${JSON.stringify(m.role)} must be admin, developer, runner or viewer`);
    }
    return { group: m.group, workspace: m.workspace, role: m.role };
  });
  const scopes = o.scopes ?? ["openid", "profile", "email", "groups"];
  if (!scopes.includes("openid")) bad(`scopes ${JSON.stringify(scopes)} must include "openid"`);
  return {
    issuer,
    clientId: o.clientId,
    ...(o.clientSecret ? { clientSecret: o.clientSecret } : {}),
    cliClientId: o.cliClientId || o.clientId,
    redirectUrl: o.redirectUrl
      ? new URL(o.redirectUrl)
      : new URL(`${publicUrl.replace(/\/+$/, "")}/auth/callback`),
    scopes,
    groupsClaim: o.groupsClaim || "groups",
    mappings,
    sessionTtlMs: ttlMs(o.sessionTtl),
  };
}

/** Checks the config's `oidc` at start (a mistake stops the coordinator) and answers it as given. */
export function checkOidcOptions(o: OidcOptions, publicUrl: string): OidcOptions {
  if (typeof o !== "object" || o === null) bad("must be an object: {issuer, clientId, mappings, ...}");
  resolveOidcOptions(o, publicUrl);
  return o;
}
