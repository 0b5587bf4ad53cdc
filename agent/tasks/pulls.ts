// Pulling task messages from a stub's durable consumer, and what a delivery
// means before any runner sees it.

import type { Consumer, JetStreamClient, JsMsg } from "nats";
import { describeError } from "../../shared/errors.ts";
import {
  type TaskError,
  type TaskFinishedEvent,
  TaskHeaders,
  TASKS_STREAM,
  stubConsumerName,
} from "../../shared/tasks.ts";
import { BridgeError } from "./bridge-error.ts";
import type { Slot, TaskWorkerLogger } from "./types.ts";

export const headerNumber = (msg: JsMsg, name: string, fallback: number): number => {
  const v = msg.headers?.get(name);
  const n = v ? Number(v) : Number.NaN;
  return Number.isFinite(n) ? n : fallback;
};

/**
 * "json" when the payload is a JSON object for the handler's parameters (a
 * task queue POST, a schedule tick: TaskHeaders.payloadFormat), undefined for
 * the pickled `(args, kwargs)`. The runner gets it as the task's `payload_format`.
 */
export const payloadFormat = (msg: JsMsg): "json" | undefined =>
  msg.headers?.get(TaskHeaders.payloadFormat) === "json" ? "json" : undefined;

/** An error the agent itself reports for a task (no traceback: nothing ran, or it was killed). */
export const taskError = (type: string, message: string): TaskError => ({ type, message, traceback: "" });

/**
 * The outcome of a delivery that must not run: expired while queued, or
 * delivered more often than its retries allow (an earlier attempt was lost
 * with its agent). Undefined when it should run.
 */
export function endedOnDelivery(
  msg: JsMsg,
  attempt: number,
  maxRetries: number,
  now: number,
): Pick<TaskFinishedEvent, "type" | "status" | "reason" | "error"> | undefined {
  const expiresAt = headerNumber(msg, TaskHeaders.expiresAt, 0);
  if (expiresAt > 0 && now > expiresAt) {
    return {
      type: "finished",
      status: "EXPIRED",
      reason: "expired",
      error: taskError(
        "TaskExpired",
        `the task expired at ${new Date(expiresAt).toISOString()} before it started`,
      ),
    };
  }
  if (attempt > maxRetries + 1) {
    return {
      type: "finished",
      status: "FAILED",
      reason: "retries_exhausted",
      error: taskError(
        "RetriesExhausted",
        `the task was delivered ${attempt} times and allows ${maxRetries} retries (an earlier attempt was lost)`,
      ),
    };
  }
  return undefined;
}

/** Messages queued right now, up to `n`, without waiting for more (a no-wait pull). */
export async function pullQueued(
  js: JetStreamClient,
  slot: Slot,
  n: number,
  log: TaskWorkerLogger,
): Promise<JsMsg[]> {
  const out: JsMsg[] = [];
  try {
    const it = js.fetch(TASKS_STREAM, stubConsumerName(slot.stubId), { batch: n, no_wait: true });
    for await (const m of it) out.push(m);
  } catch (e) {
    // Nothing lost: whatever did arrive is handed out; the waiting pull follows.
    log.warn({ stubId: slot.stubId, err: describeError(e) }, "a no-wait pull failed");
  }
  return out;
}

/** One message, waiting up to `waitMs`; undefined when none came or the pull was withdrawn. */
export async function pullOne(
  slot: Slot,
  consumer: Consumer,
  waitMs: number,
  signal: AbortSignal,
  readyNow: () => boolean,
): Promise<JsMsg | undefined> {
  let batch: Awaited<ReturnType<Consumer["fetch"]>>;
  try {
    batch = await consumer.fetch({ max_messages: 1, expires: waitMs });
  } catch (e) {
    throw new BridgeError(503, "unavailable", `cannot pull from the task queue: ${describeError(e)}`);
  }
  const stop = () => batch.stop();
  slot.pulls.add(stop);
  signal.addEventListener("abort", stop, { once: true });
  // Tasks held on this agent while the pull was being set up woke no pull (it was not in slot.pulls yet):
  // without this look it would wait its whole expiry with them waiting beside it.
  if (readyNow()) stop();
  try {
    for await (const m of batch) return m;
    return undefined;
  } catch (e) {
    if (signal.aborted || slot.closed) return undefined;
    throw new BridgeError(503, "unavailable", `pulling from the task queue failed: ${describeError(e)}`);
  } finally {
    signal.removeEventListener("abort", stop);
    slot.pulls.delete(stop);
  }
}
