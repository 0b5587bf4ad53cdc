// A process's output as an append-only byte stream of which only the last
// `capacity` bytes are kept. Offsets are absolute (bytes since the process
// started), so a reader resumes where it stopped and learns, from `start`,
// how much was trimmed before it came back.

export const OUTPUT_BUFFER_BYTES = 1024 * 1024;

export class OutputBuffer {
  private chunks: Buffer[] = [];
  private kept = 0;
  /** Absolute offset of the first byte still kept. */
  private startOffset = 0;
  private closed = false;
  private waiters: (() => void)[] = [];

  constructor(readonly capacity: number = OUTPUT_BUFFER_BYTES) {
    if (!Number.isInteger(capacity) || capacity <= 0)
      throw new Error(`output buffer: capacity must be a positive integer, got ${capacity}`);
  }

  /** The first offset still kept. */
  get start(): number {
    return this.startOffset;
  }
  /** The offset after the last byte written (total bytes written). */
  get end(): number {
    return this.startOffset + this.kept;
  }
  get isClosed(): boolean {
    return this.closed;
  }

  append(data: Uint8Array): void {
    if (this.closed || data.length === 0) return;
    let b = Buffer.from(data);
    if (b.length > this.capacity) {
      this.startOffset += this.kept + (b.length - this.capacity);
      this.chunks = [];
      this.kept = 0;
      b = b.subarray(b.length - this.capacity);
    }
    this.chunks.push(b);
    this.kept += b.length;
    while (this.kept > this.capacity) {
      const first = this.chunks[0] as Buffer;
      const over = this.kept - this.capacity;
      if (first.length <= over) {
        this.chunks.shift();
        this.kept -= first.length;
        this.startOffset += first.length;
      } else {
        this.chunks[0] = first.subarray(over);
        this.kept -= over;
        this.startOffset += over;
      }
    }
    this.wake();
  }

  /** No more output will come: followers finish. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.wake();
  }

  /** The kept bytes from `offset` (clamped to what is kept) to the end. */
  read(offset: number): { offset: number; data: Buffer } {
    const from = Math.min(Math.max(offset, this.startOffset), this.end);
    let skip = from - this.startOffset;
    const out: Buffer[] = [];
    for (const c of this.chunks) {
      if (skip >= c.length) {
        skip -= c.length;
        continue;
      }
      out.push(skip > 0 ? c.subarray(skip) : c);
      skip = 0;
    }
    return { offset: from, data: Buffer.concat(out) };
  }

  /**
   * The bytes from `offset` on: what is kept now and, while the buffer is
   * open, what comes later, until it closes or the signal aborts. Bytes
   * trimmed while the reader lagged are skipped.
   */
  async *follow(offset: number, signal?: AbortSignal): AsyncGenerator<Buffer> {
    let at = offset;
    for (;;) {
      if (signal?.aborted) return;
      const { offset: from, data } = this.read(at);
      if (data.length > 0) {
        at = from + data.length;
        yield data;
        continue;
      }
      if (this.closed) return;
      await new Promise<void>((resolve) => {
        const done = () => {
          signal?.removeEventListener("abort", done);
          resolve();
        };
        this.waiters.push(done);
        signal?.addEventListener("abort", done, { once: true });
      });
    }
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const fn of w) fn();
  }
}
