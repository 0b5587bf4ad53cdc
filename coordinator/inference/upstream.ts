// One attempt at a /v1 request on a model container: the containers' one
// forwarder (coordinator/containers/forward.ts: its retry rule, abort and
// masked failures), with the body up whole (the gateway read it for
// `model`), the answer back chunk by chunk as the server writes it (never
// buffered or compressed), read on the way for the server's token counts
// (./usage-tap.ts, the forwarder's usage hook), and a handler's error in
// OpenAI's shape. A failure before any answer goes back to the endpoints'
// dispatcher, which answers it (through the gateway's answer) and logs it.

import type { Agent } from "node:http";
import { forward } from "../containers/index.ts";
import type { TryResult } from "../endpoints/index.ts";
import type { AnswerSink } from "./answer-sink.ts";
import { tapFor, type TokenUsage } from "./usage-tap.ts";

export interface ModelRequest {
  agent: Agent;
  containerId: string;
  port: number;
  path: string;
  headers: Record<string, string | string[]>;
  body: Buffer;
  /** The caller's response, or an in-process caller's collected answer (./answer-sink.ts). */
  res: AnswerSink;
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

export async function forwardModel(f: ModelRequest): Promise<TryResult> {
  let usage: (() => TokenUsage | undefined) | undefined;
  const r = await forward({
    agent: f.agent,
    containerId: f.containerId,
    port: f.port,
    method: "POST",
    path: f.path,
    headers: f.headers,
    body: f.body,
    res: f.res,
    taskId: f.taskId,
    signal: f.signal,
    runnerErrors: "openai",
    tap: (contentType) => {
      const tap = tapFor(contentType, f.stripUsageChunk);
      usage = () => tap.usage();
      return {
        headers: (h) => {
          // The body the client gets may differ in length (a dropped usage chunk).
          if (f.stripUsageChunk) delete h["content-length"];
          if (contentType.includes("text/event-stream")) h["x-accel-buffering"] = "no";
        },
        chunk: (c) => tap.chunk(c),
        end: () => tap.end(),
        wrote: () => {
          f.seen.firstByteAt ??= f.clock();
        },
        coalesce: true,
      };
    },
  });
  if (r.kind !== "done") return r;
  const u = usage?.();
  if (u && r.outcome.status === "COMPLETE") f.seen.usage = u;
  // A handler that raised, or an answer cut off on the way (the usage row's error code).
  if (r.outcome.reason === "handler_error") f.seen.errorCode = "handler_error";
  else if (r.outcome.reason === "proxy_failed") f.seen.errorCode = "bad_gateway";
  return r;
}
