// Error answers of the paths served outside Fastify: a plain ServerResponse
// (/endpoint/..., exposed ports) or the socket of an upgrade that is refused
// (endpoint and realtime websockets, exposed ports, the shell). The status,
// body and headers are the edge's (./errors.ts).

import type { OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { type PublicError, type PublicErrorOptions, publicError } from "./public-error.ts";

const REASONS: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  412: "Precondition Failed",
  413: "Content Too Large",
  426: "Upgrade Required",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

/** An HTTP answer written straight onto the caller's socket (no upgrade happened). */
export function answerOnSocket(
  socket: Duplex,
  status: number,
  body: unknown,
  extra: Record<string, string> = {},
): void {
  if (socket.destroyed) return;
  const text = JSON.stringify(body);
  const head = [
    `HTTP/1.1 ${status} ${REASONS[status] ?? "Error"}`,
    "content-type: application/json; charset=utf-8",
    `content-length: ${Buffer.byteLength(text)}`,
    "connection: close",
    ...Object.entries(extra).map(([k, v]) => `${k}: ${v}`),
  ];
  socket.end(`${head.join("\r\n")}\r\n\r\n${text}`);
}

/** What a JSON answer is written through: a ServerResponse, or a writer of its shape (an in-process caller's). */
export interface JsonAnswerTarget {
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  writeHead(status: number, headers?: OutgoingHttpHeaders): unknown;
  end(chunk?: string): unknown;
}

/** Writes a JSON answer unless one was already started or the caller is gone. */
export function writeJsonAnswer(
  res: JsonAnswerTarget,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}

/** Answers `err` on a plain response (nothing when an answer was already started); returns what was answered. */
export function sendError(res: ServerResponse, err: unknown, o: PublicErrorOptions = {}): PublicError {
  const pe = publicError(err, o);
  writeJsonAnswer(res, pe.status, pe.body, pe.headers);
  return pe;
}

/** Refuses an upgrade with `err`, written on its socket; returns what was answered. */
export function refuseUpgrade(socket: Duplex, err: unknown, o: PublicErrorOptions = {}): PublicError {
  const pe = publicError(err, o);
  answerOnSocket(socket, pe.status, pe.body, pe.headers);
  return pe;
}
