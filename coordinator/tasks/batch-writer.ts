// Task rows are written in batches: changes collect for a few milliseconds
// (or up to a batch size) and go to the store in one transaction. Work that
// must follow the commit (acking the events, callbacks, forgetting finished
// tasks) runs once the batch is in.

import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { TaskHistoryEntry, TaskPatch, TaskRecord, TaskRepo } from "./store.ts";

export interface BatchWriterOptions {
  /** @default 15 */
  flushAfterMs?: number;
  /** @default 500 */
  maxBatch?: number;
  /** Wait before writing a failed batch again. @default 1000 */
  retryAfterMs?: number;
}

interface Batch {
  /** Whole rows of tasks written for the first time (before the patches: a later change may follow). */
  inserts: TaskRecord[];
  patches: Map<string, TaskPatch>;
  history: TaskHistoryEntry[];
  afterCommit: (() => void)[];
  done: Promise<void>;
  resolve: () => void;
  ops: number;
}

function newBatch(): Batch {
  let resolve!: () => void;
  const done = new Promise<void>((r) => {
    resolve = r;
  });
  return { inserts: [], patches: new Map(), history: [], afterCommit: [], done, resolve, ops: 0 };
}

export class BatchWriter {
  private current = newBatch();
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> | undefined;
  private stopped = false;
  private readonly flushAfterMs: number;
  private readonly maxBatch: number;
  private readonly retryAfterMs: number;

  constructor(
    private readonly repo: TaskRepo,
    private readonly log: Logger,
    o: BatchWriterOptions = {},
  ) {
    this.flushAfterMs = o.flushAfterMs ?? 15;
    this.maxBatch = o.maxBatch ?? 500;
    this.retryAfterMs = o.retryAfterMs ?? 1000;
  }

  /** Merges a change into the task's pending row update. */
  patch(taskId: string, p: TaskPatch): void {
    const b = this.current;
    const prev = b.patches.get(taskId);
    b.patches.set(taskId, prev ? Object.assign(prev, p) : { ...p });
    this.touched(b);
  }

  /** Writes a task's first row (as it is now) with its history so far. */
  insert(row: TaskRecord, history: TaskHistoryEntry[]): void {
    const b = this.current;
    b.inserts.push(row);
    for (const h of history) b.history.push(h);
    this.touched(b);
  }

  history(h: TaskHistoryEntry): void {
    this.current.history.push(h);
    this.touched(this.current);
  }

  /** Runs `fn` after the batch holding everything queued so far is committed. */
  afterCommit(fn: () => void): void {
    this.current.afterCommit.push(fn);
    this.touched(this.current);
  }

  /** Resolves once everything queued so far is committed. */
  committed(): Promise<void> {
    const b = this.current;
    if (b.ops === 0 && !this.writing) return Promise.resolve();
    if (b.ops === 0) return this.writing as Promise<void>;
    this.schedule(0);
    return b.done;
  }

  /** Writes what is queued and stops taking timers; later calls still write when committed() is awaited. */
  async stop(): Promise<void> {
    await this.committed();
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private touched(b: Batch): void {
    b.ops++;
    if (b.ops >= this.maxBatch) this.schedule(0);
    else if (!this.timer) this.schedule(this.flushAfterMs);
  }

  private schedule(ms: number): void {
    if (this.stopped && ms > 0) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, ms);
  }

  private async flush(): Promise<void> {
    if (this.writing) {
      // One transaction at a time; the next batch goes right after this one.
      await this.writing;
      if (this.current.ops > 0 && !this.timer) this.schedule(0);
      return;
    }
    const b = this.current;
    if (b.ops === 0) return;
    this.current = newBatch();
    this.writing = this.write(b);
    try {
      await this.writing;
    } finally {
      this.writing = undefined;
    }
    if (this.current.ops > 0 && !this.timer)
      this.schedule(this.current.ops >= this.maxBatch ? 0 : this.flushAfterMs);
  }

  private async write(b: Batch): Promise<void> {
    for (;;) {
      try {
        const dropped = await this.repo.applyBatch(b.patches, b.history, b.inserts);
        if (dropped.size > 0)
          this.log.info(
            { tasks: [...dropped].slice(0, 20), count: dropped.size },
            "tasks had ended already in the store; this coordinator's later status changes were dropped",
          );
        break;
      } catch (e) {
        // Events stay unacknowledged until their rows are in, so nothing is lost;
        // a store that is down is retried until it is back.
        this.log.error(
          { err: describeError(e), tasks: b.patches.size + b.inserts.length },
          "writing task rows failed; retrying",
        );
        await new Promise((r) => setTimeout(r, this.retryAfterMs));
      }
    }
    for (const fn of b.afterCommit) {
      try {
        fn();
      } catch (e) {
        this.log.error({ err: describeError(e) }, "after-commit step failed");
      }
    }
    b.resolve();
  }
}
