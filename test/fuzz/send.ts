// One fuzz request through inject(), its answer read whole — except the
// answers that stream until their subject ends (server-sent events, NDJSON):
// for those the status and headers are what is checked, and the response is
// closed as a client that goes away closes it.

import type { FastifyInstance } from "fastify";

export interface FuzzRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  payload?: string | Buffer;
}

export interface FuzzAnswer {
  status: number;
  contentType: string;
  body: string;
  /** A stream that was closed after its headers. */
  streamed: boolean;
}

const STREAM_TYPES = /^(text\/event-stream|application\/x-ndjson)/;
/** More of a body than this is not read (a file download); the rest is discarded. */
const READ_CAP = 1024 * 1024;

export async function send(app: FastifyInstance, r: FuzzRequest): Promise<FuzzAnswer> {
  const res = await app.inject({
    method: r.method as "GET",
    url: r.url,
    headers: r.headers,
    ...(r.payload !== undefined ? { payload: r.payload } : {}),
    payloadAsStream: true,
  });
  const contentType = String(res.headers["content-type"] ?? "");
  const stream = res.stream();
  const serverSide = (res.raw as { res: { destroy(): void } }).res;
  if (STREAM_TYPES.test(contentType) && res.statusCode < 300) {
    stream.on("error", () => {});
    serverSide.destroy();
    return { status: res.statusCode, contentType, body: "", streamed: true };
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const c of stream) {
      if (size < READ_CAP) chunks.push(c as Buffer);
      size += (c as Buffer).length;
    }
  } catch {
    // The server destroyed its response mid-body: what came is what is checked.
  }
  return {
    status: res.statusCode,
    contentType,
    body: Buffer.concat(chunks).toString("utf8"),
    streamed: false,
  };
}
