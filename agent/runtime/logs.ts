import { type FSWatcher, watch } from "node:fs";
import { type FileHandle, open, truncate } from "node:fs/promises";
import type { LogLine } from "./types.ts";

// A container writes stdout/stderr into plain append-only files in its
// bundle dir (runc copies its pipes into the fds berth opened with O_APPEND).
// The agent follows each file from a saved offset, so the container never
// depends on the agent being alive (no SIGPIPE on agent restart) and a
// restarted agent resumes where it left off. The file is a spool, not the
// archive: once it passes maxSpoolBytes and everything in it was read, it is
// truncated to zero (copytruncate; O_APPEND writers continue at the new end).

export interface LogFollowerOptions {
  path: string;
  containerId: string;
  stream: LogLine["stream"];
  /** Byte offset of the first unread byte (from saved metadata). */
  offset: number;
  onLine: (line: LogLine) => void;
  /** @default 16 MiB */
  maxSpoolBytes?: number;
  /** Longer lines are cut into pieces of this size. @default 16 KiB */
  maxLineBytes?: number;
  /** Bytes of recent text kept for error reports. @default 8 KiB */
  tailBytes?: number;
}

const CHUNK = 64 * 1024;

export class LogFollower {
  /** Offset after the last byte handed to onLine; safe to persist. */
  offset: number;
  private readonly o: Required<LogFollowerOptions>;
  private fh?: FileHandle;
  private pending: Buffer = Buffer.alloc(0);
  private running?: Promise<void>;
  private again = false;
  private recent = "";
  private watcher?: FSWatcher;
  private closed = false;

  constructor(opts: LogFollowerOptions) {
    this.o = { maxSpoolBytes: 16 * 1024 * 1024, maxLineBytes: 16 * 1024, tailBytes: 8 * 1024, ...opts };
    this.offset = opts.offset;
  }

  /** The id its lines carry from now on (a pre-warmed container takes its stub's container id). */
  relabel(containerId: string): void {
    this.o.containerId = containerId;
  }

  /** Reads promptly on change (inotify); the runtime's timer polls as a fallback. */
  watch(): void {
    if (this.watcher || this.closed) return;
    try {
      this.watcher = watch(this.o.path, { persistent: false }, () => void this.poll().catch(() => {}));
      this.watcher.on("error", () => this.stopWatching());
    } catch {
      // The poll timer still covers it.
    }
  }

  /** Reads everything new; concurrent calls coalesce into one more pass. */
  poll(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.readAvailable();
        } while (this.again);
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  /** Final read after the container exited: a last line without newline is emitted too. */
  async finish(): Promise<void> {
    await this.poll();
    if (this.pending.length > 0) this.emit(this.pending);
    this.pending = Buffer.alloc(0);
    this.close();
  }

  /** The last few KiB of text read from this stream. */
  tail(): string {
    return this.recent;
  }

  close(): void {
    this.closed = true;
    this.stopWatching();
    const fh = this.fh;
    this.fh = undefined;
    void fh?.close().catch(() => {});
  }

  private stopWatching(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  private async readAvailable(): Promise<void> {
    if (!this.fh) {
      try {
        this.fh = await open(this.o.path, "r");
      } catch {
        return;
      }
    }
    const fh = this.fh;
    let size = (await fh.stat()).size;
    if (size < this.offset + this.pending.length) {
      // Truncated behind our back (or by a previous agent that crashed
      // before saving the new offset): start over from the beginning.
      this.offset = 0;
      this.pending = Buffer.alloc(0);
    }
    const buf = Buffer.allocUnsafe(CHUNK);
    for (;;) {
      const pos = this.offset + this.pending.length;
      if (pos >= size) {
        size = (await fh.stat()).size;
        if (pos >= size) break;
      }
      const { bytesRead } = await fh.read(buf, 0, Math.min(CHUNK, size - pos), pos);
      if (bytesRead === 0) break;
      this.consume(buf.subarray(0, bytesRead));
    }
    if (size >= this.o.maxSpoolBytes && this.pending.length === 0 && this.offset === size) {
      // Re-check right before truncating so only bytes written in between
      // these two calls can be lost.
      if ((await fh.stat()).size === size) {
        await truncate(this.o.path, 0);
        this.offset = 0;
      }
    }
  }

  private consume(chunk: Buffer): void {
    let data = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : Buffer.from(chunk);
    for (;;) {
      const nl = data.indexOf(10);
      if (nl >= 0 && nl <= this.o.maxLineBytes) {
        this.emit(data.subarray(0, nl), 1);
        data = data.subarray(nl + 1);
      } else if (data.length > this.o.maxLineBytes) {
        this.emit(data.subarray(0, this.o.maxLineBytes));
        data = data.subarray(this.o.maxLineBytes);
      } else {
        break;
      }
    }
    this.pending = Buffer.from(data);
  }

  private emit(bytes: Buffer, terminatorBytes = 0): void {
    this.offset += bytes.length + terminatorBytes;
    let line = bytes.toString("utf8");
    if (line.endsWith("\r")) line = line.slice(0, -1);
    this.recent = (this.recent + line + "\n").slice(-this.o.tailBytes);
    try {
      this.o.onLine({ containerId: this.o.containerId, stream: this.o.stream, line, ts: Date.now() });
    } catch {
      // A failing consumer must not stop the follower or lose its offset.
    }
  }
}
