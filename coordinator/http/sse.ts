// Server-sent event responses (the events, logs and task subscribe streams):
// the headers, a keep-alive comment on a beat, the end that runs once however
// it comes (the client leaves, the feed ends, the route ends it), and a pump
// from an async feed that lets a slow client hold the feed back.

import { once } from "node:events";
import { PassThrough } from "node:stream";
import type { FastifyReply, FastifyRequest } from "fastify";

/** Spec, Limits: webhook changes apply in about 15 s; the streams' keep-alive uses the same beat. */
export const SSE_HEARTBEAT_MS = 15_000;

export interface SseEvent {
  id?: string;
  event: string;
  data: unknown;
}

export interface SseStream {
  /** Writes one event; false where the client is behind (see drained()). */
  send(e: SseEvent): boolean;
  /** Resolves once the client caught up; rejects once the stream ended. */
  drained(): Promise<void>;
  /** Ends the response and runs onEnd, once. */
  end(): void;
  readonly ended: boolean;
}

/**
 * Where a stream resumes: the `Last-Event-ID` a reconnecting client sends is
 * the last id it saw, newer than the one in its URL.
 */
export function resumeId(req: FastifyRequest, fromUrl: string | undefined): string | undefined {
  const lastEventId = req.headers["last-event-id"];
  return (typeof lastEventId === "string" && lastEventId) || fromUrl;
}

/**
 * Starts the event-stream response: `greeting` is the first comment (so the
 * client sees the stream open at once), then a keep-alive every `heartbeatMs`
 * (proxies close silent connections). `onEnd` releases what feeds it. The
 * response is sent: the route handler returns `reply`.
 */
export function openSse(
  reply: FastifyReply,
  o: { heartbeatMs: number; greeting: string; onEnd?: () => void },
): SseStream {
  const out = new PassThrough();
  const stopped = new AbortController();
  const heartbeat = setInterval(() => out.write(": keep-alive\n\n"), o.heartbeatMs);
  const stream: SseStream = {
    send: (e) =>
      out.write(
        `${e.id !== undefined ? `id: ${e.id}\n` : ""}event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`,
      ),
    drained: async () => {
      await once(out, "drain", { signal: stopped.signal });
    },
    end: () => {
      if (stopped.signal.aborted) return;
      stopped.abort();
      clearInterval(heartbeat);
      o.onEnd?.();
      out.end();
    },
    get ended() {
      return stopped.signal.aborted;
    },
  };
  reply.raw.on("close", stream.end);
  out.write(`: ${o.greeting}\n\n`);
  reply
    .header("cache-control", "no-cache")
    .header("x-accel-buffering", "no")
    .type("text/event-stream")
    .send(out);
  return stream;
}

/**
 * Sends every item of `feed` until it ends, fails or the stream ends, then
 * ends the stream. A failure after the stream ended is the client leaving,
 * not news; any other goes to `onError`.
 */
export async function pumpSse<T>(
  sse: SseStream,
  feed: AsyncIterable<T>,
  toEvent: (item: T) => SseEvent,
  onError: (e: Error) => void,
): Promise<void> {
  try {
    for await (const item of feed) {
      if (sse.ended) break;
      // A slow client holds the feed back instead of filling memory here.
      if (!sse.send(toEvent(item))) await sse.drained();
    }
  } catch (e) {
    if (!sse.ended) onError(e as Error);
  } finally {
    sse.end();
  }
}
