// One attempt at a /v1 request on a model container, through the agent
// tunnel: the body goes up whole (the gateway read it for `model`), the
// answer comes back chunk by chunk as the server writes it (never buffered
// or compressed), read on the way for the server's token counts
// (./usage-tap.ts). Modelled on coordinator/endpoints/proxy.ts forward(),
// with the same retry rule: a container that never got the request may be
// swapped for another.

import { type Agent, request, type ServerResponse } from "node:http";
import { BerthError } from "../../shared/errors.ts";
import type { TryResult } from "../endpoints/index.ts";
import { containerError, errorOf, responseHeaders } from "../endpoints/index.ts";
import { publicError } from "../http/index.ts";
import { writeJsonAnswer } from "../http/index.ts";
import { tapFor, type TokenUsage } from "./usage-tap.ts";

export interface ModelRequest {
  agent: Agent;
  containerId: string;
  port: number;
  path: string;
  headers: Record<string, string | string[]>;
  body: Buffer;
  res: ServerResponse;
  taskId: string;
  signal: AbortSignal;
  /** Drop the stream's usage-only chunk (the gateway asked for it, not the client). */
  stripUsageChunk: boolean;
  /** What the exchange saw, for the usage record. */
  seen: Exchange;
  clock: () => number;
}

export interface Exchange {
  /** When the first body byte went to the client (ms, the request's clock). */
  firstByteAt?: number;
  usage?: TokenUsage;
  errorCode?: string;
}

export function forwardModel(f: ModelRequest): Promise<TryResult> {
  return new Promise<TryResult>((resolve) => {
    let settled = false;
    let connected = false;
    let responded = false;
    const settle = (r: TryResult) => {
      if (settled) return;
      settled = true;
      f.signal.removeEventListener("abort", onAbort);
      resolve(r);
    };
    const up = request({
      agent: f.agent,
      // The tunnel's agent makes the connection; the name only keys its pool.
      host: f.containerId,
      port: f.port,
      method: "POST",
      path: f.path,
      headers: f.headers,
    });
    const onAbort = () => {
      up.destroy();
      settle({ kind: "aborted" });
    };
    if (f.signal.aborted) return onAbort();
    f.signal.addEventListener("abort", onAbort, { once: true });
    up.on("socket", (s) => {
      if ((s as { connecting?: boolean }).connecting) s.once("connect", () => (connected = true));
      else connected = true;
    });
    up.on("error", (e) => {
      if (settled) return;
      const code = (e as NodeJS.ErrnoException).code;
      const staleSocket = up.reusedSocket && !responded && (code === "ECONNRESET" || code === "EPIPE");
      if (!connected || staleSocket) return settle({ kind: "retry", error: errorOf(e) });
      if (!responded) {
        const message = `the request to the model server failed: ${errorOf(e)}`;
        const pe = publicError(new BerthError("bad_gateway", message), { shape: "openai" });
        f.seen.errorCode = "bad_gateway";
        writeJsonAnswer(f.res, pe.status, pe.body, { ...pe.headers, "x-task-id": f.taskId });
        settle({ kind: "done", outcome: failed(message) });
      }
    });
    up.on("response", (ur) => {
      responded = true;
      const res = f.res;
      if (ur.headers["x-berth-error"] === "1") {
        // An endpoint handler raised: the runner's error body, in OpenAI's shape.
        const chunks: Buffer[] = [];
        ur.on("data", (c: Buffer) => chunks.push(c));
        ur.on("error", () => {});
        ur.on("close", () => {
          const status = ur.statusCode && ur.statusCode >= 400 ? ur.statusCode : 500;
          const { error, task } = containerError(Buffer.concat(chunks), status);
          f.seen.errorCode = "handler_error";
          const body = {
            error: { message: String(error.message ?? ""), type: "server_error", code: "handler_error" },
          };
          writeJsonAnswer(res, status, body, { "x-task-id": f.taskId });
          settle({ kind: "done", outcome: { status: "FAILED", error: task, reason: "handler_error" } });
        });
        return;
      }
      const type = String(ur.headers["content-type"] ?? "");
      const tap = tapFor(type, f.stripUsageChunk);
      const headers = responseHeaders(ur.headers, { "x-task-id": f.taskId });
      // The body the client gets may differ in length (a dropped usage chunk).
      if (f.stripUsageChunk) delete headers["content-length"];
      if (type.includes("text/event-stream")) headers["x-accel-buffering"] = "no";
      if (!res.destroyed) {
        res.writeHead(ur.statusCode ?? 502, headers);
        // Stream chunks go out as written, not coalesced.
        res.socket?.setNoDelay(true);
      }
      const write = (b: Buffer) => {
        if (b.length === 0) return;
        f.seen.firstByteAt ??= f.clock();
        if (!res.write(b)) {
          ur.pause();
          res.once("drain", () => ur.resume());
        }
      };
      // The chunks one socket read brings are written together, in the same tick (res.write
      // would itself hold them corked until then): one framed write instead of one per chunk.
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
        const b = tap.chunk(c);
        if (b.length === 0) return;
        batch.push(b);
        if (!flushQueued) {
          flushQueued = true;
          process.nextTick(flush);
        }
      });
      ur.on("end", () => {
        flush();
        write(tap.end());
        res.end();
        const usage = tap.usage();
        if (usage) f.seen.usage = usage;
        settle({ kind: "done", outcome: { status: "COMPLETE", resultJson: null } });
      });
      ur.on("error", () => {});
      ur.on("close", () => {
        if (ur.complete) return;
        res.destroy();
        f.seen.errorCode = "bad_gateway";
        settle({ kind: "done", outcome: failed("the model server's answer was cut off") });
      });
    });
    up.end(f.body);
  });
}

const failed = (message: string) => ({
  status: "FAILED" as const,
  error: { type: "EndpointProxyError", message, traceback: "" },
  reason: "proxy_failed",
});
