// The JetStream side of tasks: the work-queue stream, the event stream, and
// one durable pull consumer per stub that all of the stub's runners share.

import { AckPolicy, DeliverPolicy, type JetStreamManager, RetentionPolicy, StorageType } from "nats";
import {
  ALL_TASK_EVENTS,
  ALL_TASK_SUBJECTS,
  TASK_EVENTS_STREAM,
  TASKS_STREAM,
  stubConsumerName,
  taskSubject,
} from "../../shared/tasks.ts";

const ns = (ms: number) => ms * 1_000_000;
/** How long a delivered task may go without a sign of life before JetStream redelivers it. */
export const TASK_ACK_WAIT_MS = 30_000;

const isNotFound = (e: unknown) =>
  (e as { code?: string }).code === "404" || /not found/i.test((e as Error).message ?? "");

async function ensureStream(jsm: JetStreamManager, cfg: Parameters<JetStreamManager["streams"]["add"]>[0]) {
  try {
    await jsm.streams.info(cfg.name as string);
  } catch (e) {
    if (!isNotFound(e)) throw e;
    await jsm.streams.add(cfg);
  }
}

/**
 * Creates BERTH_TASKS (work queue) and BERTH_TASK_EVENTS (limits, 1 day) when missing, with
 * `replicas` copies (coordinator/streams/replicas.ts).
 */
export async function ensureTaskStreams(jsm: JetStreamManager, replicas = 1): Promise<void> {
  await ensureStream(jsm, {
    name: TASKS_STREAM,
    subjects: [ALL_TASK_SUBJECTS],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    num_replicas: replicas,
  });
  await ensureStream(jsm, {
    name: TASK_EVENTS_STREAM,
    subjects: [ALL_TASK_EVENTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: ns(86_400_000),
    num_replicas: replicas,
  });
}

/**
 * The stub's durable consumer. max_deliver is unlimited: the agent counts
 * attempts against each task's own max_retries and terminates the message.
 */
export async function ensureStubConsumer(jsm: JetStreamManager, stubId: string): Promise<void> {
  const name = stubConsumerName(stubId);
  try {
    await jsm.consumers.info(TASKS_STREAM, name);
  } catch (e) {
    if (!isNotFound(e)) throw e;
    await jsm.consumers.add(TASKS_STREAM, {
      durable_name: name,
      filter_subject: taskSubject(stubId),
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: ns(TASK_ACK_WAIT_MS),
      max_deliver: -1,
      max_ack_pending: 10_000,
      max_waiting: 4096,
    });
  }
}
