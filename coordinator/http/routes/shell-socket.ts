// A small RFC 6455 websocket over a socket, both ends: the coordinator's
// shell route (server) and `berth shell` (client). Only what a terminal
// session needs: text and binary messages, fragments, ping/pong, close.
// (No extensions: permessage-deflate is never offered or accepted.)

import { createHash, randomBytes } from "node:crypto";
import type { Duplex } from "node:stream";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/** Largest message accepted; a terminal never sends one near it. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

const OP = { continuation: 0, text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;

/** The Sec-WebSocket-Accept answer to a Sec-WebSocket-Key. */
export function acceptKey(key: string): string {
  return createHash("sha1").update(`${key}${GUID}`).digest("base64");
}

/** A fresh Sec-WebSocket-Key. */
export const newKey = (): string => randomBytes(16).toString("base64");

export interface MessageHandlers {
  message(data: Buffer, binary: boolean): void;
  /** Once, when the connection ends for any reason; `code` from the peer's close frame (1006 when none). */
  close(code: number, reason: string): void;
}

export class FrameSocket {
  private buf: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentOp = 0;
  private closed = false;
  private sentClose = false;

  /** `client` masks what it sends (RFC 6455 5.3); `head` is what came with the handshake. */
  constructor(
    private readonly socket: Duplex,
    private readonly role: "server" | "client",
    private readonly on: MessageHandlers,
    head: Buffer = Buffer.alloc(0),
  ) {
    socket.on("data", (c: Buffer) => this.receive(c));
    socket.on("error", () => {});
    socket.on("close", () => this.ended(1006, ""));
    // A peer gone without a close frame: an upgraded socket stays half-open (no "close") until ended here.
    socket.on("end", () => {
      this.ended(1006, "");
      socket.destroy();
    });
    if (head.length > 0) setImmediate(() => this.receive(head));
  }

  get isOpen(): boolean {
    return !this.closed && !this.sentClose;
  }

  sendBinary(data: Uint8Array): void {
    this.send(OP.binary, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  }

  sendText(text: string): void {
    this.send(OP.text, Buffer.from(text, "utf8"));
  }

  /** Sends a close frame and ends the socket once written. */
  close(code = 1000, reason = ""): void {
    if (this.sentClose || this.closed) return;
    const body = Buffer.alloc(2 + Buffer.byteLength(reason));
    body.writeUInt16BE(code, 0);
    body.write(reason, 2);
    this.send(OP.close, body);
    this.sentClose = true;
    this.socket.end();
  }

  private send(op: number, payload: Buffer): void {
    if (this.sentClose || this.closed || this.socket.destroyed) return;
    const mask = this.role === "client";
    const len = payload.length;
    const lenBytes = len < 126 ? 0 : len < 65536 ? 2 : 8;
    const header = Buffer.alloc(2 + lenBytes + (mask ? 4 : 0));
    header[0] = 0x80 | op;
    header[1] = (mask ? 0x80 : 0) | (lenBytes === 0 ? len : lenBytes === 2 ? 126 : 127);
    if (lenBytes === 2) header.writeUInt16BE(len, 2);
    if (lenBytes === 8) header.writeBigUInt64BE(BigInt(len), 2);
    let body = payload;
    if (mask) {
      const key = randomBytes(4);
      key.copy(header, 2 + lenBytes);
      body = Buffer.allocUnsafe(len);
      for (let i = 0; i < len; i++) body[i] = (payload[i] as number) ^ (key[i & 3] as number);
    }
    this.socket.write(Buffer.concat([header, body]));
  }

  private receive(chunk: Buffer): void {
    if (this.closed) return;
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    for (;;) {
      const frame = this.nextFrame();
      if (!frame) return;
      if (this.closed) return;
      this.handle(frame.fin, frame.op, frame.payload);
    }
  }

  private nextFrame(): { fin: boolean; op: number; payload: Buffer } | undefined {
    const b = this.buf;
    if (b.length < 2) return undefined;
    const fin = ((b[0] as number) & 0x80) !== 0;
    const op = (b[0] as number) & 0x0f;
    const masked = ((b[1] as number) & 0x80) !== 0;
    let len = (b[1] as number) & 0x7f;
    let at = 2;
    if (len === 126) {
      if (b.length < 4) return undefined;
      len = b.readUInt16BE(2);
      at = 4;
    } else if (len === 127) {
      if (b.length < 10) return undefined;
      const big = b.readBigUInt64BE(2);
      if (big > BigInt(MAX_MESSAGE_BYTES)) return this.fail(1009, "message too big");
      len = Number(big);
      at = 10;
    }
    if (len > MAX_MESSAGE_BYTES) return this.fail(1009, "message too big");
    // A server takes only masked frames, a client only unmasked ones (RFC 6455 5.1).
    if (masked !== (this.role === "server")) return this.fail(1002, "wrong masking");
    const keyAt = at;
    if (masked) at += 4;
    if (b.length < at + len) return undefined;
    const payload = Buffer.from(b.subarray(at, at + len));
    if (masked)
      for (let i = 0; i < len; i++) payload[i] = (payload[i] as number) ^ (b[keyAt + (i & 3)] as number);
    this.buf = b.subarray(at + len);
    return { fin, op, payload };
  }

  private handle(fin: boolean, op: number, payload: Buffer): void {
    if (op === OP.ping) {
      this.send(OP.pong, payload);
      return;
    }
    if (op === OP.pong) return;
    if (op === OP.close) {
      const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
      const reason = payload.length > 2 ? payload.subarray(2).toString("utf8") : "";
      if (!this.sentClose) this.close(code === 1005 ? 1000 : code);
      this.ended(code, reason);
      return;
    }
    if (op === OP.text || op === OP.binary) {
      this.fragmentOp = op;
      this.fragments = [payload];
    } else if (op === OP.continuation && this.fragments.length > 0) {
      this.fragments.push(payload);
    } else {
      this.fail(1002, `unexpected opcode ${op}`);
      return;
    }
    if (!fin) return;
    const data = this.fragments.length === 1 ? (this.fragments[0] as Buffer) : Buffer.concat(this.fragments);
    this.fragments = [];
    this.on.message(data, this.fragmentOp === OP.binary);
  }

  private fail(code: number, reason: string): undefined {
    this.close(code, reason);
    this.ended(code, reason);
    this.socket.destroy();
    return undefined;
  }

  private ended(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.on.close(code, reason);
  }
}
