// Task events go to JetStream in batches: the events raised in one turn of
// the event loop (a runner's batch of results, a burst of runners finishing)
// share one stored message, so a map's thousands of tasks cost the agent,
// NATS and the coordinator one publish and one delivery per batch, not per
// task. A lone event goes out as before, on its task's own subject.

import type { JetStreamClient } from "nats";
import { type TaskEvent, taskEventBatchSubject, taskEventSubject } from "../../shared/tasks.ts";

const enc = new TextEncoder();
/** Keeps a batch well under NATS's max_payload (8 MiB in berth's config) unless one event is bigger. */
const MAX_BATCH_BYTES = 2 * 1024 * 1024;
const MAX_BATCH_EVENTS = 500;

interface Queued {
  text: string;
  event: TaskEvent;
  resolve: () => void;
  reject: (e: unknown) => void;
}

const msgId = (e: TaskEvent) => `${e.taskId}:${e.attempt}:${e.type}${e.type === "finished" ? e.status : ""}`;

export class TaskEventPublisher {
  private queue: Queued[] = [];
  private scheduled = false;

  constructor(
    private readonly js: JetStreamClient,
    private readonly agentId: string,
  ) {}

  /** Resolves once the event is stored (its batch's PubAck came back). */
  publish(event: TaskEvent): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ text: JSON.stringify(event), event, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    const all = this.queue;
    this.queue = [];
    let i = 0;
    while (i < all.length) {
      const batch: Queued[] = [];
      let bytes = 0;
      while (i < all.length && batch.length < MAX_BATCH_EVENTS) {
        const q = all[i] as Queued;
        if (batch.length > 0 && bytes + q.text.length > MAX_BATCH_BYTES) break;
        batch.push(q);
        bytes += q.text.length;
        i++;
      }
      void this.send(batch);
    }
  }

  private async send(batch: Queued[]): Promise<void> {
    try {
      if (batch.length === 1) {
        const q = batch[0] as Queued;
        // The message id lets JetStream drop a duplicate when a publish is retried.
        await this.js.publish(taskEventSubject(this.agentId, q.event.taskId), enc.encode(q.text), {
          msgID: msgId(q.event),
        });
      } else {
        // Spliced rather than re-stringified: each event's JSON is already made.
        const body = `{"type":"batch","events":[${batch.map((q) => q.text).join(",")}]}`;
        await this.js.publish(taskEventBatchSubject(this.agentId), enc.encode(body));
      }
      for (const q of batch) q.resolve();
    } catch (e) {
      for (const q of batch) q.reject(e);
    }
  }
}
