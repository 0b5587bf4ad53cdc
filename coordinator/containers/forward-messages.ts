// The messages around a request the coordinator forwards to a container
// (./forward.ts): the caller's body read whole, the headers each way, and the
// runner's error body.

import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { TaskError } from "../../shared/tasks.ts";
import { HttpRefusal } from "../http/index.ts";

/** Headers of one connection, not of the message (RFC 9110 7.6.1); never forwarded. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/**
 * The caller's whole body, refused (413) past `limit` bytes, by its
 * Content-Length before any is read; `hint` follows the refusal's text
 * (what to do instead).
 */
export function readBody(req: IncomingMessage, limit: number, hint = ""): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    // 413, not resource_exhausted's 429: the same body can never pass.
    const tooLarge = () =>
      new HttpRefusal("resource_exhausted", `the body is over ${limit / 1024 / 1024} MiB${hint}`, {
        status: 413,
      });
    if (Number(req.headers["content-length"] ?? 0) > limit) return reject(tooLarge());
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        req.destroy();
        reject(tooLarge());
      } else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/** The caller's headers as the container gets them. */
export function upstreamHeaders(
  from: IncomingHttpHeaders,
  o: { dropAuthorization: boolean; remoteAddress: string | undefined; prefix: string },
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(from)) {
    if (v === undefined || HOP_BY_HOP.has(k)) continue;
    if (k === "authorization" && o.dropAuthorization) continue;
    out[k] = v;
  }
  const prior = from["x-forwarded-for"];
  const client = o.remoteAddress ?? "";
  out["x-forwarded-for"] = prior ? `${prior}, ${client}` : client;
  out["x-forwarded-proto"] ??= "http";
  if (from.host) out["x-forwarded-host"] ??= from.host;
  out["x-forwarded-prefix"] = o.prefix;
  return out;
}

/** The container's response headers as the caller gets them, with `extra` (X-Task-Id) set. */
export function responseHeaders(
  h: IncomingHttpHeaders,
  extra: Record<string, string> = {},
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return Object.assign(out, extra);
}

/** A socket's or a request's error as one line, its code first (for logs: never for a client). */
export const errorOf = (e: unknown): string => {
  const code = (e as NodeJS.ErrnoException)?.code;
  const msg = e instanceof Error ? e.message : String(e);
  return code && !msg.includes(code) ? `${code}: ${msg}` : msg;
};

/** The runner's `{"error": {...}}` body (an endpoint handler raised) as a task error. */
export function containerError(
  body: Buffer,
  status: number,
): { error: Record<string, unknown>; task: TaskError } {
  let error: Record<string, unknown> | undefined;
  try {
    const parsed = JSON.parse(body.toString("utf8")) as { error?: unknown };
    if (parsed?.error && typeof parsed.error === "object") error = parsed.error as Record<string, unknown>;
  } catch {
    // Not the runner's shape: report what it was.
  }
  error ??= {
    type: "EndpointError",
    message: `the container answered ${status} without an error body: ${body.subarray(0, 200).toString("utf8")}`,
  };
  const str = (v: unknown) => (typeof v === "string" ? v : "");
  return {
    error,
    task: { type: str(error.type) || "Error", message: str(error.message), traceback: str(error.traceback) },
  };
}
