// Tasks a runner was handed but did not start (released from a batch that
// ran long, or the unstarted rest of a dead container's batch), and tasks of
// a newer stub config than the container that pulled them. They wait on
// this agent for the next runner of their stub: handing them back to
// JetStream would count a delivery, and so an attempt, that never ran.

import type { InFlight } from "./types.ts";
import { TaskTrace } from "./trace.ts";

export class ReadyQueues {
  private readonly queues = new Map<string, InFlight[]>();
  private readonly timers = new Map<string, NodeJS.Timeout>();

  /** After `holdMs` without a runner of the stub taking them, a stub's tasks go back to JetStream. */
  constructor(
    private readonly holdMs: number,
    private readonly trace: TaskTrace = new TaskTrace(),
  ) {}

  push(stubId: string, t: InFlight): void {
    let queue = this.queues.get(stubId);
    if (!queue) {
      queue = [];
      this.queues.set(stubId, queue);
      const timer = setTimeout(() => this.drop(stubId, true), this.holdMs);
      timer.unref?.();
      this.timers.set(stubId, timer);
    }
    queue.push(t);
  }

  /** Whether a task of the stub that `accept` takes (any, without it) waits here. */
  has(stubId: string, accept?: (t: InFlight) => boolean): boolean {
    const queue = this.queues.get(stubId);
    return queue !== undefined && (accept ? queue.some(accept) : queue.length > 0);
  }

  /** The oldest waiting task of the stub that `accept` takes (any, without it), if any. */
  shift(stubId: string, accept?: (t: InFlight) => boolean): InFlight | undefined {
    const queue = this.queues.get(stubId);
    if (!queue) return undefined;
    const i = accept ? queue.findIndex(accept) : 0;
    if (i < 0) return undefined;
    const [t] = queue.splice(i, 1);
    if (queue.length === 0) this.drop(stubId, false);
    return t;
  }

  /** Removes a task wherever it waits (it was cancelled); undefined when it does not. */
  remove(taskId: string): InFlight | undefined {
    for (const [stubId, queue] of this.queues) {
      const i = queue.findIndex((t) => t.taskId === taskId);
      if (i < 0) continue;
      const [t] = queue.splice(i, 1);
      if (queue.length === 0) this.drop(stubId, false);
      return t;
    }
    return undefined;
  }

  /** Forgets every queue; with `requeue`, their tasks go back to JetStream now. */
  clear(requeue: boolean): void {
    for (const stubId of [...this.queues.keys()]) this.drop(stubId, requeue);
  }

  private drop(stubId: string, requeue: boolean): void {
    clearTimeout(this.timers.get(stubId));
    this.timers.delete(stubId);
    const queue = this.queues.get(stubId) ?? [];
    this.queues.delete(stubId);
    for (const t of queue) {
      clearInterval(t.workingTimer);
      if (requeue) {
        if (this.trace.on) this.trace.event("ready-nak", { task: t.taskId });
        t.msg.nak();
      }
    }
  }
}
