// A push-to-pull bridge from stream events to an async iterator, so a gRPC
// stream's end and its error status arrive in order: an error reported after
// the last message is thrown by the iterator instead of reading as a clean end.

export interface AsyncQueueOptions {
  /** Called when more than `highWater` items wait, to pause the producer. */
  onFull?: () => void;
  /** Called when the waiting items drop back to half of `highWater`. */
  onDrained?: () => void;
  /** @default 256 */
  highWater?: number;
}

export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private done = false;
  private error: unknown;
  private failed = false;
  private full = false;
  private wake?: () => void;
  private readonly highWater: number;

  constructor(private readonly options: AsyncQueueOptions = {}) {
    this.highWater = options.highWater ?? 256;
  }

  push(item: T): void {
    if (this.done) return;
    this.items.push(item);
    if (!this.full && this.items.length > this.highWater && this.options.onFull) {
      this.full = true;
      this.options.onFull();
    }
    this.notify();
  }

  end(): void {
    this.done = true;
    this.notify();
  }

  fail(error: unknown): void {
    if (this.done) return;
    this.failed = true;
    this.error = error;
    this.end();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        if (this.full && this.items.length <= this.highWater / 2) {
          this.full = false;
          this.options.onDrained?.();
        }
        yield item;
        continue;
      }
      if (this.done) {
        if (this.failed) throw this.error;
        return;
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }
}
