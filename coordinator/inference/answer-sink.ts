// Where the gateway writes a /v1 answer. An HTTP caller's is its
// ServerResponse, which streams the answer onto the socket as it comes; an
// in-process caller's (a bot's model call) is a CollectedAnswer, which keeps
// it whole in memory. The gateway and the upstream exchange (./upstream.ts)
// use only what AnswerSink names, so both callers take the same request path:
// routing, limits, scale-from-zero, usage row and metrics.

import { EventEmitter } from "node:events";
import type { OutgoingHttpHeaders } from "node:http";

/** The part of a node ServerResponse the gateway writes through (a ServerResponse is one). */
export interface AnswerSink {
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  readonly writableFinished: boolean;
  readonly statusCode: number;
  /** A stream's chunks go out as written (Nagle off), where there is a socket. */
  readonly socket?: { setNoDelay(noDelay?: boolean): unknown } | null;
  writeHead(status: number, headers?: OutgoingHttpHeaders): unknown;
  /** False: wait for "drain" before writing more. */
  write(chunk: Buffer): boolean;
  end(chunk?: string | Buffer): unknown;
  /** The caller is gone (or is told the answer broke off): "close" follows. */
  destroy(): unknown;
  once(event: "drain", listener: () => void): unknown;
  on(event: "close", listener: () => void): unknown;
  off(event: "close", listener: () => void): unknown;
}

/** An answer as an in-process caller gets it: status, headers and the whole body. */
export interface InferenceAnswer {
  status: number;
  headers: OutgoingHttpHeaders;
  body: Buffer;
}

/**
 * An answer kept in memory. It never pushes back (write is always taken),
 * so the model server's answer is read as fast as it comes; destroy() is the
 * caller leaving, which the gateway sees as "close" before the end and
 * answers as a hang-up (the upstream request aborted, a 499 usage row).
 */
export class CollectedAnswer extends EventEmitter implements AnswerSink {
  statusCode = 200;
  headers: OutgoingHttpHeaders = {};
  headersSent = false;
  destroyed = false;
  writableFinished = false;
  readonly socket = null;
  private readonly chunks: Buffer[] = [];

  writeHead(status: number, headers: OutgoingHttpHeaders = {}): this {
    if (this.headersSent) throw new Error("the answer's head was already written");
    this.statusCode = status;
    this.headers = { ...headers };
    this.headersSent = true;
    return this;
  }

  write(chunk: Buffer | string): boolean {
    if (this.destroyed || this.writableFinished) return false;
    if (!this.headersSent) this.writeHead(this.statusCode);
    this.chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
    return true;
  }

  end(chunk?: string | Buffer): this {
    if (this.destroyed || this.writableFinished) return this;
    if (chunk !== undefined && chunk.length > 0) this.write(chunk);
    if (!this.headersSent) this.writeHead(this.statusCode);
    this.writableFinished = true;
    // As a ServerResponse: "close" follows the end too.
    queueMicrotask(() => this.emit("close"));
    return this;
  }

  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    this.emit("close");
    return this;
  }

  /** The answer as it stands (whole once writableFinished). */
  answer(): InferenceAnswer {
    return { status: this.statusCode, headers: this.headers, body: Buffer.concat(this.chunks) };
  }
}
