// How each way a task attempt ends becomes one task event and a settled
// message (docs/tasks.md, "Task status transitions"): a runner's result, or
// its container's death. Its own module because this mapping (which event,
// then ack, nak or term) is the status table in code, while worker.ts is the
// delivery and hand-out machinery around it. The event is always published
// before the message is settled, so a failed publish leaves the message for
// the caller to nak.

import type { ExitReason } from "../../api/index.ts";
import { memoryKillMessage } from "../../shared/memory-kill.ts";
import type { TaskError, TaskEvent, TaskStartedEvent } from "../../shared/tasks.ts";
import type { TaskEventPublisher } from "./event-publisher.ts";
import { taskError } from "./pulls.ts";
import type { ResultBody } from "./result.ts";
import type { LimitHit } from "./limits.ts";
import type { InFlight } from "./types.ts";
import type { TaskTrace } from "./trace.ts";

/** The fields every event of one attempt carries, with its folded start (in-flight.ts foldedStart). */
export type AttemptBase = Omit<TaskStartedEvent, "type"> & { startedAt?: number };

/**
 * The runner's result: COMPLETE is acked, a retry_for within max_retries
 * nakked, any other end termed. A failure a container limit explains
 * (`limit`) carries that reason and error instead of the task's own.
 * The ack is traced in `trace`.
 */
export async function recordResult(
  events: TaskEventPublisher,
  trace: TaskTrace,
  base: AttemptBase,
  t: InFlight,
  r: ResultBody,
  limit?: LimitHit,
): Promise<void> {
  if (r.status === "COMPLETE" && r.tooLarge) {
    await finishFailed(events, base, t, { reason: "result_too_large", error: r.tooLarge });
  } else if (r.status === "COMPLETE") {
    const e: TaskEvent = { ...base, type: "finished", status: "COMPLETE", result: r.result };
    if (r.resultJson !== undefined) e.resultJson = r.resultJson;
    await events.publish(e);
    if (trace.on) trace.event("ack", { task: t.taskId });
    t.msg.ack();
  } else if (r.retry && t.attempt <= t.maxRetries) {
    const reason = limit ? `${limit.reason}: retry_for` : "retry_for";
    await events.publish({ ...base, type: "retry", reason, error: limit?.error ?? r.error });
    t.msg.nak();
  } else if (limit) {
    await finishFailed(events, base, t, limit);
  } else {
    await finishFailed(events, base, t, { error: r.error });
  }
}

/**
 * The container died while the task ran: retried within max_retries, else
 * FAILED. The runtime's exit reason names a death the exit code alone cannot
 * tell apart: an OOM kill is `oom_killed` (error OutOfMemory, naming the container's
 * `memoryBytes` limit and `memory=`), not "exit code 137";
 * a death a container limit explains (`limit`: refused forks, a full disk) is
 * `pids_exhausted` or `disk_full`.
 */
export async function recordCrash(
  events: TaskEventPublisher,
  base: AttemptBase,
  t: InFlight,
  crash: { code: string; reason?: ExitReason; limit?: LimitHit; memoryBytes?: number; gangRank?: number },
): Promise<void> {
  const { code, reason: exitReason, limit, memoryBytes } = crash;
  const oom = exitReason === "oom_killed";
  // A gang's task runs on rank 0's container: its end ends the gang (the coordinator stops the rest).
  const rank = crash.gangRank === undefined ? "" : `gang rank ${crash.gangRank} ended: `;
  if (t.attempt <= t.maxRetries) {
    const why = oom ? "oom_killed" : (limit?.reason ?? "container_exited");
    await events.publish({ ...base, type: "retry", reason: `${rank}${why}: exit code ${code}` });
    t.msg.nak();
  } else if (!oom && limit) {
    await finishFailed(events, base, t, limit);
  } else {
    await finishFailed(events, base, t, {
      reason: oom ? "oom_killed" : "container_exited",
      error: oom
        ? taskError(
            "OutOfMemory",
            `the container ran out of memory (exit code ${code} on the last attempt): ${memoryKillMessage(memoryBytes)}`,
          )
        : taskError("ContainerExited", `${rank}container exited with code ${code} on the last attempt`),
    });
  }
}

/** The attempt's end is FAILED for good: the finished event with `failure`'s reason and error, then the message termed. */
async function finishFailed(
  events: TaskEventPublisher,
  base: AttemptBase,
  t: InFlight,
  failure: { reason?: string; error: TaskError },
): Promise<void> {
  const { reason, error } = failure;
  await events.publish({
    ...base,
    type: "finished",
    status: "FAILED",
    ...(reason !== undefined && { reason }),
    error,
  });
  t.msg.term();
}
