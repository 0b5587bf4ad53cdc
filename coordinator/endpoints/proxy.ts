// One attempt at sending a request to a container's HTTP server through the
// agent tunnel and relaying its answer to the caller.

import {
  type Agent,
  type ClientRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  request,
  type ServerResponse,
} from "node:http";
import type { Readable } from "node:stream";
import { BerthError } from "../../shared/errors.ts";
import type { TaskError } from "../../shared/tasks.ts";
import { publicError } from "../http/index.ts";
import { sendError, writeJsonAnswer } from "../http/index.ts";
import type { DirectOutcome } from "../tasks/index.ts";
import { MAX_RESULT_JSON_BYTES } from "./types.ts";

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

/** Where and what a proxied request goes to: a container port through the agent's tunnel. */
export interface UpstreamTarget {
  agent: Agent;
  containerId: string;
  port: number;
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
}

function upstreamRequest(f: UpstreamTarget): ClientRequest {
  return request({
    agent: f.agent,
    // The tunnel's agent makes the connection; the name only keys its pool and never resolves.
    host: f.containerId,
    port: f.port,
    method: f.method,
    path: f.path,
    headers: f.headers,
  });
}

export interface ForwardRequest extends UpstreamTarget {
  /** The whole body (endpoint), or the caller's request stream (asgi). */
  body: Buffer | Readable;
  res: ServerResponse;
  taskId: string;
  /** Aborts the upstream request: the caller went away, the task timed out or was cancelled. */
  signal: AbortSignal;
  /** Whether a JSON response is kept as the task's result even without a JSON Content-Type. */
  jsonResult: boolean;
}

export type ForwardResult =
  /** Nothing reached the container (the tunnel failed): safe to try another one. */
  | { kind: "retry"; error: string }
  /** The caller has its answer (or is gone); the task ends with `outcome`. */
  | { kind: "done"; outcome: DirectOutcome }
  /** `signal` fired first; the caller decides what the task becomes and whether to answer. */
  | { kind: "aborted" };

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

export const errorOf = (e: unknown): string => {
  const code = (e as NodeJS.ErrnoException)?.code;
  const msg = e instanceof Error ? e.message : String(e);
  return code && !msg.includes(code) ? `${code}: ${msg}` : msg;
};

/** The container's `{"error": {...}}` body as a task error. */
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

const ERROR_BODY_LIMIT = 1024 * 1024;

export function forward(f: ForwardRequest): Promise<ForwardResult> {
  return new Promise<ForwardResult>((resolve) => {
    let settled = false;
    let connected = false;
    let bodyStarted = false;
    let responded = false;
    const settle = (r: ForwardResult) => {
      if (settled) return;
      settled = true;
      f.signal.removeEventListener("abort", onAbort);
      resolve(r);
    };
    const up = upstreamRequest(f);
    const onAbort = () => {
      up.destroy();
      settle({ kind: "aborted" });
    };
    if (f.signal.aborted) return onAbort();
    f.signal.addEventListener("abort", onAbort, { once: true });

    // Connected = the tunnel reached the container; an error before that means nothing was sent.
    const onConnected = () => {
      connected = true;
      if (!Buffer.isBuffer(f.body)) {
        bodyStarted = true;
        f.body.pipe(up);
      }
    };
    up.on("socket", (s) => {
      if ((s as { connecting?: boolean }).connecting) s.once("connect", onConnected);
      else onConnected();
    });
    up.on("error", (e) => {
      if (settled) return;
      const replayable = !bodyStarted || Buffer.isBuffer(f.body);
      const code = (e as NodeJS.ErrnoException).code;
      // A keep-alive connection the server had already closed never carried this request.
      const staleSocket = up.reusedSocket && !responded && (code === "ECONNRESET" || code === "EPIPE");
      if (replayable && (!connected || staleSocket)) return settle({ kind: "retry", error: errorOf(e) });
      if (!responded) {
        const message = `the request to the container failed: ${errorOf(e)}`;
        const pe = publicError(new BerthError("bad_gateway", message), { extra: { task_id: f.taskId } });
        writeJson(f.res, pe.status, pe.body, f.taskId, pe.headers);
        return settle({ kind: "done", outcome: failed("EndpointProxyError", message, "proxy_failed") });
      }
    });
    up.on("response", (ur) => {
      responded = true;
      if (ur.headers["x-berth-error"] === "1") relayError(f, ur, settle);
      else relay(f, ur, settle);
    });

    if (Buffer.isBuffer(f.body)) up.end(f.body);
  });
}

function relayError(f: ForwardRequest, ur: IncomingMessage, settle: (r: ForwardResult) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  ur.on("data", (c: Buffer) => {
    size += c.length;
    if (size <= ERROR_BODY_LIMIT) chunks.push(c);
  });
  ur.on("error", () => {});
  ur.on("close", () => {
    const status = ur.statusCode && ur.statusCode >= 400 ? ur.statusCode : 500;
    const { error, task } = containerError(Buffer.concat(chunks), status);
    writeJson(f.res, status, { error, task_id: f.taskId }, f.taskId);
    settle({ kind: "done", outcome: { status: "FAILED", error: task, reason: "handler_error" } });
  });
}

function relay(f: ForwardRequest, ur: IncomingMessage, settle: (r: ForwardResult) => void): void {
  const res = f.res;
  const type = String(ur.headers["content-type"] ?? "");
  const keep = f.jsonResult || type.includes("json");
  const kept: Buffer[] = [];
  let keptBytes = 0;
  if (!res.destroyed)
    res.writeHead(ur.statusCode ?? 502, responseHeaders(ur.headers, { "x-task-id": f.taskId }));
  ur.on("data", (c: Buffer) => {
    if (keep && keptBytes <= MAX_RESULT_JSON_BYTES) {
      keptBytes += c.length;
      kept.push(c);
    }
    if (!res.write(c)) {
      ur.pause();
      res.once("drain", () => ur.resume());
    }
  });
  ur.on("end", () => {
    res.end();
    settle({ kind: "done", outcome: { status: "COMPLETE", resultJson: jsonText(kept, keptBytes) } });
  });
  ur.on("error", () => {});
  ur.on("close", () => {
    if (ur.complete) return;
    // The container (or the tunnel) dropped the response half way; the caller's answer is cut short too.
    res.destroy();
    settle({
      kind: "done",
      outcome: failed("EndpointProxyError", "the container's response was cut off", "proxy_failed"),
    });
  });
}

function jsonText(chunks: Buffer[], size: number): string | null {
  if (chunks.length === 0 || size > MAX_RESULT_JSON_BYTES) return null;
  const text = Buffer.concat(chunks).toString("utf8");
  try {
    JSON.parse(text);
    return text;
  } catch {
    return null;
  }
}

const failed = (type: string, message: string, reason: string): DirectOutcome => ({
  status: "FAILED",
  error: { type, message, traceback: "" },
  reason,
});

/** Writes a JSON answer (with the request's task id) unless one was already started or the caller is gone. */
export function writeJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  taskId?: string,
  headers: Record<string, string> = {},
): void {
  writeJsonAnswer(res, status, body, taskId ? { ...headers, "x-task-id": taskId } : headers);
}

export interface RawForwardRequest extends UpstreamTarget {
  /** The caller's request: its body streams to the container as it comes. */
  req: IncomingMessage;
  res: ServerResponse;
}

/**
 * Proxies one request to a container port with no task around it (exposed
 * ports, pods): the container's answer goes back as it is. Resolves when the
 * exchange is over; a container that cannot be reached is answered 502.
 */
export function forwardRaw(f: RawForwardRequest): Promise<void> {
  return new Promise<void>((resolve) => {
    const { req, res } = f;
    const up = upstreamRequest(f);
    const onCallerGone = () => {
      if (!res.writableFinished) up.destroy();
      resolve();
    };
    res.once("close", onCallerGone);
    up.on("error", (e) => {
      if (!res.headersSent) {
        const message = `the request to port ${f.port} of container ${f.containerId} failed: ${errorOf(e)}`;
        sendError(res, new BerthError("bad_gateway", message));
      } else res.destroy();
      resolve();
    });
    up.on("response", (ur) => {
      if (!res.destroyed) res.writeHead(ur.statusCode ?? 502, responseHeaders(ur.headers));
      ur.pipe(res);
      ur.on("error", () => {});
      ur.on("close", () => {
        // The container (or the tunnel) dropped the response half way; the caller's answer is cut short too.
        if (!ur.complete) res.destroy();
        resolve();
      });
    });
    req.pipe(up);
  });
}
