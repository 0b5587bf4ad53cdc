// One forwarder for every request the coordinator sends to a container port
// through its agent's tunnel (./tunnels.ts): endpoint and ASGI requests (a
// task around each), the /v1 gateway's (a usage tap on the answer), and
// pods' and exposed ports' (no task: the container's answer goes back as it
// is). One retry rule, one relay of the runner's errors, one abort, and one
// failure: what went wrong on the way (a socket's words, an agent's address)
// goes to the log under an error id, the caller gets the catalog's message
// and that id (MaskedError, coordinator/http/public-error.ts).

import { type Agent, type IncomingMessage, request, type ServerResponse } from "node:http";
import type { Readable } from "node:stream";
import type { BerthError } from "../../shared/errors.ts";
import {
  type EdgeLog,
  type JsonAnswerTarget,
  MaskedError,
  sendError,
  writeJsonAnswer,
} from "../http/index.ts";
import type { DirectOutcome } from "../tasks/index.ts";
import { containerError, errorOf, responseHeaders } from "./forward-messages.ts";

/** Largest answer kept as the task's JSON result (callbacks' `data`). */
export const MAX_RESULT_JSON_BYTES = 4 * 1024 * 1024;
/** Largest runner error body read; the rest is dropped. */
const ERROR_BODY_LIMIT = 1024 * 1024;

/** Where and what a forwarded request goes to: a container port through the agent's tunnel. */
export interface UpstreamTarget {
  /** The tunnel's keep-alive agent for this container port (TunnelDialer.httpAgent). */
  agent: Agent;
  containerId: string;
  port: number;
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
}

/** The usage hook: sees, and may rewrite, the container's answer on its way (the /v1 token counts). */
export interface AnswerTap {
  /** Edits the caller's response headers before they go (a body that changes length drops its own). */
  headers?(h: Record<string, string | string[]>): void;
  /** What the caller gets of a chunk (possibly nothing). */
  chunk(c: Buffer): Buffer;
  /** What the caller still gets at the end. */
  end(): Buffer;
  /** Called before each write of bytes to the caller (the time to first byte). */
  wrote?(): void;
  /**
   * The chunks one socket read brings go out together, in the same tick, on
   * a NoDelay socket: one framed write instead of one per chunk, never held
   * back (token streams).
   */
  coalesce?: boolean;
}

/**
 * What the answer is written through: the caller's ServerResponse, or a
 * writer of its shape (the /v1 gateway's in-process callers).
 */
export interface AnswerWriter extends JsonAnswerTarget {
  /** A coalesced stream's chunks go out as written (Nagle off), where there is a socket. */
  readonly socket?: { setNoDelay(noDelay?: boolean): unknown } | null;
  /** False: wait for "drain" before writing more. */
  write(chunk: Buffer): boolean;
  end(chunk?: string): unknown;
  /** The answer broke off: the caller sees it cut short. */
  destroy(): unknown;
  once(event: "drain", listener: () => void): unknown;
}

export interface ForwardRequest extends UpstreamTarget {
  /** The whole body (replayable on another container), or the caller's request stream (piped once connected). */
  body: Buffer | Readable;
  res: AnswerWriter;
  /** Aborts the exchange: the caller went away, the task timed out or was cancelled. */
  signal: AbortSignal;
  /** The request's task: X-Task-Id on the answer, task_id in an error body. */
  taskId?: string;
  /**
   * The runner's error answers (X-Berth-Error: 1, an endpoint handler
   * raised) become the task's error, answered in this shape; without it they
   * pass through like any answer (pods, ports: no runner).
   */
  runnerErrors?: "api" | "openai";
  /** Keep the answer as the task's JSON result: "always" when it parses, "json" only with a JSON Content-Type. */
  keepResult?: "always" | "json";
  /** Made once the answer's Content-Type is known. */
  tap?: (contentType: string) => AnswerTap;
  /** What the request was for, in the caller's terms: the start of a failure's message. */
  about?: string;
}

export type ForwardResult =
  /** Nothing reached the container (the tunnel failed, a stale keep-alive socket): safe to try another one. */
  | { kind: "retry"; error: string }
  /** The caller has its answer (or is gone); the task ends with `outcome`. */
  | { kind: "done"; outcome: DirectOutcome }
  /** The request failed before any answer: the caller is answered `error` by whoever forwarded it. */
  | { kind: "failed"; error: BerthError; reason: string }
  /** `signal` fired first; the caller decides what the task becomes and whether to answer. */
  | { kind: "aborted" };

/** Sends one request to the container and relays its answer; never rejects. */
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
    const up = request({
      agent: f.agent,
      // The tunnel's agent makes the connection; the name only keys its pool and never resolves.
      host: f.containerId,
      port: f.port,
      method: f.method,
      path: f.path,
      headers: f.headers,
    });
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
      // After the answer began, its own end (complete or cut off) settles.
      if (settled || responded) return;
      const replayable = !bodyStarted || Buffer.isBuffer(f.body);
      const code = (e as NodeJS.ErrnoException).code;
      // A keep-alive connection the server had already closed never carried this request.
      const staleSocket = up.reusedSocket && (code === "ECONNRESET" || code === "EPIPE");
      if (replayable && (!connected || staleSocket)) return settle({ kind: "retry", error: errorOf(e) });
      settle({ kind: "failed", error: requestFailed(f, errorOf(e), e), reason: "proxy_failed" });
    });
    up.on("response", (ur) => {
      responded = true;
      if (f.runnerErrors && ur.headers["x-berth-error"] === "1")
        relayRunnerError(f, f.runnerErrors, ur, settle);
      else relay(f, ur, settle);
    });

    if (Buffer.isBuffer(f.body)) up.end(f.body);
  });
}

/** A request that reached no answer, as the caller is told it (masked) and the log keeps it. */
export function requestFailed(
  f: Pick<ForwardRequest, "about" | "port" | "containerId">,
  detail: string,
  cause?: unknown,
): MaskedError {
  const about = f.about ?? `port ${f.port} of container ${f.containerId}`;
  return new MaskedError("bad_gateway", `the request to ${about} failed: ${detail}`, {
    ...(f.about ? { about: f.about } : {}),
    ...(cause !== undefined ? { cause } : {}),
  });
}

function relayRunnerError(
  f: ForwardRequest,
  shape: "api" | "openai",
  ur: IncomingMessage,
  settle: (r: ForwardResult) => void,
): void {
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
    const taskHeader: Record<string, string> = f.taskId ? { "x-task-id": f.taskId } : {};
    const body =
      shape === "openai"
        ? { error: { message: String(error.message ?? ""), type: "server_error", code: "handler_error" } }
        : { error, ...(f.taskId ? { task_id: f.taskId } : {}) };
    writeJsonAnswer(f.res, status, body, taskHeader);
    settle({ kind: "done", outcome: { status: "FAILED", error: task, reason: "handler_error" } });
  });
}

function relay(f: ForwardRequest, ur: IncomingMessage, settle: (r: ForwardResult) => void): void {
  const res = f.res;
  const type = String(ur.headers["content-type"] ?? "");
  const keep = f.keepResult === "always" || (f.keepResult === "json" && type.includes("json"));
  const kept: Buffer[] = [];
  let keptBytes = 0;
  const tap = f.tap?.(type);
  const headers = responseHeaders(ur.headers, f.taskId ? { "x-task-id": f.taskId } : {});
  tap?.headers?.(headers);
  if (!res.destroyed) {
    res.writeHead(ur.statusCode ?? 502, headers);
    if (tap?.coalesce) res.socket?.setNoDelay(true);
  }
  const write = (b: Buffer) => {
    if (b.length === 0) return;
    tap?.wrote?.();
    if (!res.write(b)) {
      ur.pause();
      res.once("drain", () => ur.resume());
    }
  };
  // The chunks one socket read brings are written together, in the same tick (res.write
  // would itself hold them corked until then).
  const batch: Buffer[] = [];
  let flushQueued = false;
  const flush = () => {
    flushQueued = false;
    if (batch.length === 0) return;
    const b = batch.length === 1 ? (batch[0] as Buffer) : Buffer.concat(batch);
    batch.length = 0;
    write(b);
  };
  ur.on("data", (c: Buffer) => {
    if (keep && keptBytes <= MAX_RESULT_JSON_BYTES) {
      keptBytes += c.length;
      kept.push(c);
    }
    const out = tap ? tap.chunk(c) : c;
    if (!tap?.coalesce) return write(out);
    if (out.length === 0) return;
    batch.push(out);
    if (!flushQueued) {
      flushQueued = true;
      process.nextTick(flush);
    }
  });
  ur.on("end", () => {
    flush();
    if (tap) write(tap.end());
    res.end();
    settle({
      kind: "done",
      outcome: { status: "COMPLETE", resultJson: keep ? jsonText(kept, keptBytes) : null },
    });
  });
  ur.on("error", () => {});
  ur.on("close", () => {
    if (ur.complete) return;
    // The container (or the tunnel) dropped the answer half way; the caller's is cut short too.
    res.destroy();
    settle({
      kind: "done",
      outcome: {
        status: "FAILED",
        error: { type: "EndpointProxyError", message: "the container's answer was cut off", traceback: "" },
        reason: "proxy_failed",
      },
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

export interface PlainForwardRequest extends UpstreamTarget {
  /** The caller's request: its body streams to the container as it comes. */
  req: IncomingMessage;
  res: ServerResponse;
  /** Where a failure's detail is logged, under the id the caller's answer names. */
  log: EdgeLog;
  /** What the request was for, in the caller's terms (a pod): the start of a failure's message. */
  about?: string;
}

/**
 * Proxies one request to a container port with no task around it (exposed
 * ports, pods): the container's answer goes back as it is, the runner's
 * error header included. Resolves when the exchange is over; a container
 * that cannot be reached is answered 502 (masked, the detail logged).
 */
export async function forwardPlain(f: PlainForwardRequest): Promise<void> {
  const { req, res, log, ...target } = f;
  const gone = new AbortController();
  const onCallerGone = () => {
    if (!res.writableFinished) gone.abort();
  };
  res.once("close", onCallerGone);
  try {
    const r = await forward({ ...target, body: req, res, signal: gone.signal });
    // No other container to try: a request that reached none failed.
    const failure =
      r.kind === "retry" ? requestFailed(f, r.error) : r.kind === "failed" ? r.error : undefined;
    if (failure) sendError(res, failure, { log, what: "proxied request failed", context: { url: req.url } });
  } finally {
    res.off("close", onCallerGone);
  }
}
