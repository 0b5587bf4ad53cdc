// Tasks whose row is not written yet. A direct task (an endpoint request)
// usually ends within milliseconds; writing its row when it is created, again
// when it starts and again when it ends cost three store writes for what one
// can hold. Such a task lives only in the live index until it ends or has
// been open for `foldMs`, whichever comes first: then its whole row and every
// history entry so far go into one batch. Everything that reads tasks looks
// at the live index first, so an unwritten task reads like any other.

import type { TaskHistoryEntry } from "./store.ts";
import type { LiveTask } from "./live-index.ts";

/** How long a direct task may stay unwritten (ms). */
export const FOLD_MS = 200;

export interface Unwritten {
  task: LiveTask;
  /** History entries in the order they happened. */
  history: TaskHistoryEntry[];
  /** Work that must follow the row's commit (what the engine would have queued on the writer). */
  afterCommit: (() => void)[];
  /** performance.now() by which the row is written even if the task is still open. */
  dueAt: number;
}

export class UnwrittenTasks {
  // Insertion order is creation order, so the first entries are the first due.
  private readonly tasks = new Map<string, Unwritten>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly foldMs: number,
    /** Writes the row of a task taken out because it is due. */
    private readonly due: (u: Unwritten) => void,
  ) {}

  get size(): number {
    return this.tasks.size;
  }

  add(task: LiveTask): void {
    this.tasks.set(task.id, { task, history: [], afterCommit: [], dueAt: performance.now() + this.foldMs });
    if (!this.timer) this.arm();
  }

  has(taskId: string): boolean {
    return this.tasks.has(taskId);
  }

  /** Keeps a history entry of an unwritten task; false when the task's row is written (or it is not one). */
  record(h: TaskHistoryEntry): boolean {
    const u = this.tasks.get(h.taskId);
    if (!u) return false;
    u.history.push(h);
    return true;
  }

  /** Keeps work for after the row's commit; false when the task's row is written. */
  afterCommit(taskId: string, fn: () => void): boolean {
    const u = this.tasks.get(taskId);
    if (!u) return false;
    u.afterCommit.push(fn);
    return true;
  }

  /** The history so far of an unwritten task (a copy), else undefined. */
  history(taskId: string): TaskHistoryEntry[] | undefined {
    return this.tasks.get(taskId)?.history.slice();
  }

  /** Takes the task out: its row is about to be written. */
  take(taskId: string): Unwritten | undefined {
    const u = this.tasks.get(taskId);
    if (u) this.tasks.delete(taskId);
    return u;
  }

  /** Takes every task out (the coordinator stops: their rows are written as they are). */
  takeAll(): Unwritten[] {
    const all = [...this.tasks.values()];
    this.tasks.clear();
    clearTimeout(this.timer);
    this.timer = undefined;
    return all;
  }

  private arm(): void {
    const first = this.tasks.values().next().value as Unwritten | undefined;
    if (!first) return;
    this.timer = setTimeout(() => this.fire(), Math.max(0, first.dueAt - performance.now()));
    // Pending rows never hold the process up; stopping writes them (takeAll).
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    const now = performance.now();
    for (const u of this.tasks.values()) {
      if (u.dueAt > now) break;
      this.tasks.delete(u.task.id);
      this.due(u);
    }
    this.arm();
  }
}
