// streamLogs over the runtime's log spools (one append-only file per stream).
// Each call reads the files itself, from its own offsets, so any number of
// readers can follow one container without touching the runtime's follower.
// The spools record no timestamps and not how the two streams interleave:
// past lines carry the file's modification time, new lines the time they
// were read; within one read, stdout's lines come before stderr's.

import { type FSWatcher, watch } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import type { LogEntry } from "../../api/index.ts";

type Stream = LogEntry["stream"];

export interface LogStreamOptions {
  containerId: string;
  files: Record<Stream, string>;
  /** Past lines per stream to start with; undefined = everything in the spool. */
  tail?: number;
  follow: boolean;
  signal?: AbortSignal;
  /** True once the container has exited and its output is complete. */
  stopped: () => boolean;
  /** Fallback poll when inotify misses a write. @default 250 */
  pollMs?: number;
}

const MAX_LINE_BYTES = 16 * 1024;
const TAIL_SCAN_LIMIT = 8 * 1024 * 1024;

class SpoolReader {
  offset = 0;
  private pending = Buffer.alloc(0);

  constructor(
    readonly path: string,
    readonly stream: Stream,
  ) {}

  /** Positions the reader so that the last `n` complete lines (and a partial last line) are read next. */
  async seekTail(n: number | undefined): Promise<number> {
    const fh = await openOrNone(this.path);
    if (!fh) return Date.now();
    try {
      const st = await fh.stat();
      if (n === undefined) {
        this.offset = Math.max(0, st.size - TAIL_SCAN_LIMIT);
        return st.mtimeMs;
      }
      const start = Math.max(0, st.size - TAIL_SCAN_LIMIT);
      const buf = Buffer.alloc(st.size - start);
      await fh.read(buf, 0, buf.length, start);
      // Count back from the start of a trailing partial line (which is read too, when complete).
      let end = buf.length;
      if (end > 0 && buf[end - 1] !== 10) end = end >= 2 ? buf.lastIndexOf(10, end - 2) + 1 : 0;
      let pos = end;
      for (let i = 0; i < n && pos > 0; i++) pos = pos >= 2 ? buf.lastIndexOf(10, pos - 2) + 1 : 0;
      this.offset = start + pos;
      return st.mtimeMs;
    } finally {
      await fh.close();
    }
  }

  /** Complete lines written since the last read; with `flush`, a final unterminated line too. */
  async read(flush = false): Promise<string[]> {
    const lines: string[] = [];
    const fh = await openOrNone(this.path);
    if (fh) {
      try {
        const size = (await fh.stat()).size;
        if (size < this.offset + this.pending.length) {
          // The runtime truncated the spool (copytruncate): start from the beginning.
          this.offset = 0;
          this.pending = Buffer.alloc(0);
        }
        const from = this.offset + this.pending.length;
        if (size > from) {
          const buf = Buffer.alloc(size - from);
          const { bytesRead } = await fh.read(buf, 0, buf.length, from);
          this.consume(buf.subarray(0, bytesRead), lines);
        }
      } finally {
        await fh.close();
      }
    }
    if (flush && this.pending.length > 0) {
      lines.push(this.take(this.pending.length, 0));
    }
    return lines;
  }

  private consume(chunk: Buffer, lines: string[]): void {
    this.pending = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : Buffer.from(chunk);
    for (;;) {
      const nl = this.pending.indexOf(10);
      if (nl >= 0 && nl <= MAX_LINE_BYTES) lines.push(this.take(nl, 1));
      else if (this.pending.length > MAX_LINE_BYTES) lines.push(this.take(MAX_LINE_BYTES, 0));
      else break;
    }
  }

  private take(len: number, terminator: number): string {
    let line = this.pending.subarray(0, len).toString("utf8");
    if (line.endsWith("\r")) line = line.slice(0, -1);
    this.pending = this.pending.subarray(len + terminator);
    this.offset += len + terminator;
    return line;
  }
}

async function openOrNone(path: string): Promise<FileHandle | undefined> {
  try {
    return await open(path, "r");
  } catch {
    return undefined;
  }
}

/** Past lines, then (with follow) new ones until the container stops or the signal aborts. */
export async function* streamLogFiles(o: LogStreamOptions): AsyncGenerator<LogEntry> {
  const readers = (["stdout", "stderr"] as const).map((s) => new SpoolReader(o.files[s], s));
  const entry = (r: SpoolReader, line: string, ts: number): LogEntry => ({
    containerId: o.containerId,
    stream: r.stream,
    line,
    ts,
  });
  // Whether the output was complete is decided once, before any spool is
  // read: a container that ends between the stdout and the stderr read has
  // written to stdout after it was read, which the follow loop reads next.
  const finished = !o.follow || o.stopped();
  for (const r of readers) {
    const mtime = await r.seekTail(o.tail);
    for (const line of await r.read(finished)) yield entry(r, line, Math.round(mtime));
  }
  if (finished || o.signal?.aborted) return;

  let wake: (() => void) | undefined;
  const notify = () => wake?.();
  const watchers: FSWatcher[] = [];
  for (const r of readers) {
    try {
      const w = watch(r.path, { persistent: false }, notify);
      w.on("error", () => {});
      watchers.push(w);
    } catch {
      // The poll below still covers it.
    }
  }
  o.signal?.addEventListener("abort", notify);
  try {
    for (;;) {
      const stoppedBefore = o.stopped();
      for (const r of readers) {
        for (const line of await r.read(stoppedBefore)) {
          if (o.signal?.aborted) return;
          yield entry(r, line, Date.now());
        }
      }
      // The container's output is complete once it stopped before this last read.
      if (stoppedBefore || o.signal?.aborted) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, o.pollMs ?? 250);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  } finally {
    o.signal?.removeEventListener("abort", notify);
    for (const w of watchers) w.close();
  }
}
