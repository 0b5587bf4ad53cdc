// The /v1 gateway's usage rows, written off the request's path
// (docs/inference.md, Usage): a finished request only queues its row; the
// queue goes to the store as one multi-row insert FLUSH_MS later (or at once
// when a full statement's worth waits). A request used to end with its own
// insert on the event loop, which held up the next request's first token.
// Nothing is lost on the way: a failed write keeps its rows for the next
// flush, a read of the usage API flushes first (a caller sees its own
// requests), and close() — the coordinator's stop — writes what is left.

import type { Logger } from "pino";
import { USAGE_ROWS_PER_INSERT, type UsageRecord } from "./store.ts";

/** How long a finished request's row waits to be written with others (ms). */
export const USAGE_FLUSH_MS = 50;
/**
 * Rows kept while the store refuses writes; past this the oldest are dropped
 * (and counted in the log), so a store outage cannot grow memory without end.
 */
export const MAX_QUEUED_USAGE_ROWS = 100_000;

export interface UsageRowSink {
  recordUsageRows(rows: readonly UsageRecord[]): Promise<unknown>;
}

export class UsageWriter {
  private queue: UsageRecord[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The write in progress: one at a time, so rows reach the store in the order requests ended. */
  private writing: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly sink: UsageRowSink,
    private readonly log: Logger,
    private readonly o: { flushMs?: number; maxQueued?: number } = {},
  ) {}

  /** Rows waiting to be written. */
  get queued(): number {
    return this.queue.length;
  }

  /** Queues one request's row; never throws, never waits. */
  add(r: UsageRecord): void {
    this.queue.push(r);
    const max = this.o.maxQueued ?? MAX_QUEUED_USAGE_ROWS;
    if (this.queue.length > max) {
      const dropped = this.queue.splice(0, this.queue.length - max);
      this.log.error(
        { dropped: dropped.length, kept: max },
        "inference: usage rows dropped: the store has refused writes for too long",
      );
    }
    if (this.closed || this.queue.length >= USAGE_ROWS_PER_INSERT) this.schedule(0);
    else this.schedule(this.o.flushMs ?? USAGE_FLUSH_MS);
  }

  /** Writes every queued row now (and waits for a write in progress); rejects when the store refuses. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.writing) await this.writing;
    if (this.queue.length === 0) return;
    const rows = this.queue;
    this.queue = [];
    const run = this.write(rows);
    // Waiters only wait for it; the flush that started it reports its failure.
    this.writing = run.then(
      () => {
        this.writing = undefined;
      },
      () => {
        this.writing = undefined;
      },
    );
    return run;
  }

  /** The coordinator stops: writes what is queued; rows of requests that end later are written one flush each. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush().catch((e) =>
      this.log.error(
        { err: e, rows: this.queue.length },
        "inference: usage rows not written at stop: the store refused them",
      ),
    );
  }

  private schedule(ms: number): void {
    if (this.timer && ms > 0) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush().catch((e) =>
        this.log.error({ err: e, rows: this.queue.length }, "inference: cannot record usage; will retry"),
      );
    }, ms);
    // The queue never holds the process up; close() writes it at stop.
    this.timer.unref();
  }

  /** Writes `rows` in statements of USAGE_ROWS_PER_INSERT; what was not written goes back to the queue's head. */
  private async write(rows: UsageRecord[]): Promise<void> {
    for (let i = 0; i < rows.length; i += USAGE_ROWS_PER_INSERT) {
      try {
        await this.sink.recordUsageRows(rows.slice(i, i + USAGE_ROWS_PER_INSERT));
      } catch (e) {
        this.queue = rows.slice(i).concat(this.queue);
        if (!this.closed) this.schedule(Math.max(this.o.flushMs ?? USAGE_FLUSH_MS, 1000));
        throw e;
      }
    }
  }
}
