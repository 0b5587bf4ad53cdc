// Pulling task messages from a stub's durable consumer, and what a delivery
// means before any runner sees it.

import { createInbox, type JsMsg, type Msg, type NatsConnection, nanos, type Subscription } from "nats";
import { toJsMsg } from "nats/lib/jetstream/jsmsg.js";
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
import { TaskTrace } from "./trace.ts";

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

/**
 * One pull request on a stub's durable consumer, read to its end. JetStream
 * counts a message as delivered once it sends it to a request's inbox; one
 * that reaches no reader waits out the ack wait (30 s) before it is sent
 * again. nats.js's fetch drops such messages: it ends a no-wait pull at the
 * first message that says none is pending (the server goes on filling the
 * request with what is published next), and a stopped fetch unsubscribes
 * at once (dropping what is already on its way). A TaskPull keeps reading
 * until the server ends the request (the batch filled, or a status: 404
 * none queued, 408 expired or nothing more for a no-wait pull) or, once
 * stopped, until the server has confirmed the unsubscribe (a drain): every
 * message the request brought is in `done`.
 */
export class TaskPull {
  /** The messages the request brought; rejects only when it failed before any came. */
  readonly done: Promise<JsMsg[]>;
  /** Names this pull in the trace (0 when it is off). */
  readonly id: number;
  private readonly msgs: JsMsg[] = [];
  private readonly sub: Subscription;
  private readonly timer: NodeJS.Timeout;
  private settle!: (msgs: JsMsg[]) => void;
  private fail!: (e: Error) => void;
  private ended = false;
  private stopping = false;

  /** `expiresMs` undefined: a no-wait pull (what is queued right now). */
  constructor(
    nc: NatsConnection,
    stubId: string,
    private readonly batch: number,
    expiresMs?: number,
    private readonly trace: TaskTrace = new TaskTrace(),
  ) {
    this.id = trace.on ? trace.nextId() : 0;
    this.done = new Promise((resolve, reject) => {
      this.settle = resolve;
      this.fail = reject;
    });
    // The connection's own prefix: an agent's NATS user may subscribe only under it.
    const inbox = createInbox((nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
    if (trace.on)
      trace.event("pull-start", { pull: this.id, kind: expiresMs ? "wait" : "no-wait", batch, expiresMs });
    this.sub = nc.subscribe(inbox, { callback: (err, m) => this.onMessage(err, m) });
    const request = expiresMs ? { batch, expires: nanos(expiresMs) } : { batch, no_wait: true };
    nc.publish(
      `$JS.API.CONSUMER.MSG.NEXT.${TASKS_STREAM}.${stubConsumerName(stubId)}`,
      JSON.stringify(request),
      {
        reply: inbox,
      },
    );
    // The server always ends a request; this is for a server that went away meanwhile.
    this.timer = setTimeout(() => this.stop(), (expiresMs ?? 0) + PULL_GRACE_MS);
    this.timer.unref?.();
  }

  /** Withdraws the request; what the server sent before it saw the withdrawal still comes in `done`. */
  stop(): void {
    if (this.ended || this.stopping) return;
    this.stopping = true;
    if (this.trace.on) this.trace.event("pull-stop", { pull: this.id });
    this.sub.drain().then(
      () => this.end(),
      (e) => this.end(e as Error),
    );
  }

  private onMessage(err: Error | null, m: Msg): void {
    if (this.ended) return;
    if (err) {
      this.end(err);
      return;
    }
    // A status (no payload, a code in the header line): 100 is a heartbeat; any other
    // ends the request (404 or 408 normally). A task message's header line has no code.
    const code = m.headers?.code ?? 0;
    if (code === 100) return;
    if (code > 0) {
      this.end(
        code === 404 || code === 408
          ? undefined
          : new Error(`${code} ${m.headers?.description ?? ""}`.trim()),
      );
      return;
    }
    const msg = toJsMsg(m, ACK_TIMEOUT_MS);
    if (this.trace.on)
      this.trace.event("pull-msg", {
        pull: this.id,
        task: taskIdOf(msg),
        seq: msg.seq,
        rc: msg.info.redeliveryCount,
      });
    this.msgs.push(msg);
    if (this.msgs.length >= this.batch) this.end();
  }

  private end(err?: Error): void {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.timer);
    // Ended by the server (or drained): nothing more comes for this request.
    if (!this.stopping && !this.sub.isClosed()) this.sub.unsubscribe();
    if (this.trace.on)
      this.trace.event("pull-end", {
        pull: this.id,
        got: this.msgs.length,
        ...(err ? { err: err.message } : {}),
      });
    if (err && this.msgs.length === 0) this.fail(err);
    else this.settle(this.msgs);
  }
}

/** How long past its expiry a pull waits for the server's word before withdrawing itself. */
const PULL_GRACE_MS = 5_000;
/** nats.js's default for a JetStream message's acks. */
const ACK_TIMEOUT_MS = 5_000;

/** Messages queued right now, up to `n`, without waiting for more (a no-wait pull). */
export async function pullQueued(
  nc: NatsConnection,
  slot: Slot,
  n: number,
  log: TaskWorkerLogger,
  trace?: TaskTrace,
): Promise<JsMsg[]> {
  try {
    return await new TaskPull(nc, slot.stubId, n, undefined, trace).done;
  } catch (e) {
    // Nothing lost: whatever did arrive is handed out; the waiting pull follows.
    log.warn({ stubId: slot.stubId, err: describeError(e) }, "a no-wait pull failed");
    return [];
  }
}

/** One message, waiting up to `waitMs`; undefined when none came, the pull was withdrawn before one, or tasks held here can be taken. */
export async function pullOne(
  nc: NatsConnection,
  slot: Slot,
  waitMs: number,
  signal: AbortSignal,
  readyNow: () => boolean,
  trace?: TaskTrace,
): Promise<JsMsg | undefined> {
  if (readyNow()) return undefined;
  let pull: TaskPull;
  try {
    pull = new TaskPull(nc, slot.stubId, 1, waitMs, trace);
  } catch (e) {
    throw new BridgeError(503, "unavailable", `cannot pull from the task queue: ${describeError(e)}`);
  }
  const stop = () => pull.stop();
  slot.pulls.add(stop);
  signal.addEventListener("abort", stop, { once: true });
  try {
    const [m] = await pull.done;
    return m;
  } catch (e) {
    if (signal.aborted || slot.closed) return undefined;
    throw new BridgeError(503, "unavailable", `pulling from the task queue failed: ${describeError(e)}`);
  } finally {
    signal.removeEventListener("abort", stop);
    slot.pulls.delete(stop);
  }
}

const taskIdOf = (m: JsMsg): string => m.headers?.get(TaskHeaders.taskId) ?? "";
