// What a webhook subscription may hold, and how a delivery is signed.

import { createHmac, randomBytes } from "node:crypto";
import { isIP } from "node:net";
import { BerthError } from "../../shared/errors.ts";
import { EVENT_TYPES } from "../events/index.ts";
import type { SecretKey } from "../secrets/index.ts";
import { open, seal } from "../secrets/index.ts";

export const WEBHOOK_SECRET_PREFIX = "whsec_";
export const WEBHOOK_URL_MAX = 2048;
export const WEBHOOK_DESCRIPTION_MAX = 1000;
export const WEBHOOK_EVENT_TYPES_MAX = 50;

/** The prefixes a `prefix.*` pattern may use: the families of EVENT_TYPES. */
export const EVENT_PREFIXES: readonly string[] = [...new Set(EVENT_TYPES.map((t) => t.split(".")[0] ?? t))];

/** Every pattern a subscription may hold, for error messages and docs. */
export const VALID_EVENT_PATTERNS: readonly string[] = [
  "*",
  ...EVENT_PREFIXES.map((p) => `${p}.*`),
  ...EVENT_TYPES,
];

/** `whsec_` + 32 random bytes as base64url; shown to the user once. */
export function newSigningSecret(): string {
  return `${WEBHOOK_SECRET_PREFIX}${randomBytes(32).toString("base64url")}`;
}

/** The X-Service-Signature value: `sha256=` + hex HMAC-SHA256 of the raw body under the full secret. */
export function signBody(secret: string, body: string | Buffer): string {
  return `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
}

/** Whether a URL points at this coordinator (deliveries there would loop through its own API). */
export type IsSelf = (url: URL) => boolean;

const defaultPort = (u: URL) => u.port || (u.protocol === "https:" ? "443" : "80");
const bareHost = (h: string) => h.replace(/^\[|\]$/g, "").toLowerCase();

function isLoopback(host: string): boolean {
  const h = bareHost(host);
  if (h === "localhost" || h.endsWith(".localhost") || h === "::1" || h === "0.0.0.0" || h === "::")
    return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  // IPv4-mapped IPv6 forms of 127.x (WHATWG URL writes them in hex: ::ffff:7f00:1).
  return /^::ffff:(127\.|7f[0-9a-f]{2}:)/.test(h);
}

/**
 * isSelf for a coordinator reachable at `publicUrl` (its configured public
 * base URL) and listening on `port`: the public host:port, and any loopback
 * address with the listening port. `port` may be a function, for a port known
 * only once the server listens (port 0).
 */
export function selfUrlMatcher(o: { publicUrl?: string | undefined; port: number | (() => number) }): IsSelf {
  const pub = o.publicUrl ? new URL(o.publicUrl) : undefined;
  const pubKey = pub && `${bareHost(pub.hostname)}:${defaultPort(pub)}`;
  const listening = typeof o.port === "function" ? o.port : () => o.port as number;
  return (u) => {
    const port = defaultPort(u);
    if (pubKey && `${bareHost(u.hostname)}:${port}` === pubKey) return true;
    return isLoopback(u.hostname) && port === String(listening());
  };
}

/** The parsed URL; invalid_request naming the cause when it is not an http(s) URL elsewhere. */
export function checkWebhookUrl(url: unknown, isSelf: IsSelf): string {
  if (typeof url !== "string" || url.trim() === "") {
    throw new BerthError("invalid_request", "a webhook needs a url", { field: "url" });
  }
  if (url.length > WEBHOOK_URL_MAX) {
    throw new BerthError(
      "invalid_request",
      `the webhook url is ${url.length} characters; at most ${WEBHOOK_URL_MAX}`,
      {
        field: "url",
      },
    );
  }
  let u: URL;
  try {
    u = new URL(url.trim());
  } catch {
    throw new BerthError("invalid_request", `the webhook url ${JSON.stringify(url)} is not a URL`, {
      field: "url",
    });
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new BerthError(
      "invalid_request",
      `the webhook url must be http or https, not ${u.protocol.replace(/:$/, "")}`,
      { field: "url" },
    );
  }
  if (u.username || u.password) {
    throw new BerthError("invalid_request", "the webhook url must not carry a user name or password", {
      field: "url",
    });
  }
  if (isSelf(u)) {
    throw new BerthError(
      "invalid_request",
      `the webhook url ${u.origin} points at this coordinator; deliveries must go to another service`,
      { field: "url" },
    );
  }
  return u.toString();
}

/** The patterns, de-duplicated in order; invalid_request naming the unknown ones and every valid one. */
export function checkEventTypes(patterns: unknown): string[] {
  if (!Array.isArray(patterns) || patterns.some((p) => typeof p !== "string")) {
    throw new BerthError("invalid_request", "event_types must be an array of strings", {
      field: "event_types",
    });
  }
  const list = [...new Set(patterns as string[])];
  if (list.length > WEBHOOK_EVENT_TYPES_MAX) {
    throw new BerthError(
      "invalid_request",
      `event_types has ${list.length} patterns; at most ${WEBHOOK_EVENT_TYPES_MAX}`,
      { field: "event_types" },
    );
  }
  const unknown = list.filter((p) => !VALID_EVENT_PATTERNS.includes(p));
  if (unknown.length > 0) {
    throw new BerthError(
      "invalid_request",
      `unknown event type pattern${unknown.length > 1 ? "s" : ""} ${unknown.map((p) => JSON.stringify(p)).join(", ")}; valid patterns are ${VALID_EVENT_PATTERNS.join(", ")}`,
      { field: "event_types", unknown, valid: VALID_EVENT_PATTERNS },
    );
  }
  return list;
}

export function checkDescription(description: unknown): string {
  if (description === undefined || description === null) return "";
  if (typeof description !== "string") {
    throw new BerthError("invalid_request", "description must be a string", { field: "description" });
  }
  if (description.length > WEBHOOK_DESCRIPTION_MAX) {
    throw new BerthError(
      "invalid_request",
      `description is ${description.length} characters; at most ${WEBHOOK_DESCRIPTION_MAX}`,
      { field: "description" },
    );
  }
  return description;
}

/** The signing secret's seal: bound to its workspace and webhook id, under a name no workspace secret can have. */
const sealName = (webhookId: string) => `webhook/${webhookId}`;

export function sealSigningSecret(key: SecretKey, workspaceId: string, webhookId: string, secret: string) {
  return seal(key, workspaceId, sealName(webhookId), secret);
}

/** The secret, or undefined when this coordinator's key cannot open it. */
export function openSigningSecret(
  key: SecretKey,
  w: { id: string; workspaceId: string; sealedSecret: { ciphertext: Buffer; nonce: Buffer } },
): string | undefined {
  return open(key, w.workspaceId, sealName(w.id), w.sealedSecret);
}
