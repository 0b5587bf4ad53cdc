// The task status machine of docs/tasks.md ("Task status transitions"), as a
// pure function from a task's state and an agent's event to the steps taken.

import { TERMINAL_STATUSES, type TaskEvent, type TaskStatus } from "../../shared/tasks.ts";

/** Every arrow of the table; nothing else is ever applied. */
export const ALLOWED: Readonly<Record<TaskStatus, readonly TaskStatus[]>> = {
  PENDING: ["RUNNING", "EXPIRED", "CANCELLED"],
  RUNNING: ["COMPLETE", "FAILED", "RETRY", "TIMEOUT", "CANCELLED"],
  RETRY: ["RUNNING", "FAILED", "CANCELLED", "EXPIRED"],
  COMPLETE: [],
  FAILED: [],
  TIMEOUT: [],
  EXPIRED: [],
  CANCELLED: [],
};

export const isTerminal = (s: TaskStatus) => TERMINAL_STATUSES.has(s);

export interface Step {
  status: TaskStatus;
  reason: string | null;
}

/**
 * The statuses a task passes through for one agent event, in order; empty
 * when the event is late, stale or a duplicate. Steps the event implies are
 * made explicit: a start for a higher attempt while RUNNING means the earlier
 * attempt's agent vanished (JetStream redelivered it: a crash, so RETRY), and
 * an outcome that needs RUNNING after a start event that never came passes
 * through RUNNING.
 */
export function stepsFor(
  task: { status: TaskStatus; attempt: number },
  ev: TaskEvent,
  /** The attempt the coordinator moved to RETRY because its agent was lost (TaskEngine.presumeLost). */
  lostAttempt?: number,
): Step[] {
  if (isTerminal(task.status) || ev.attempt < task.attempt) return [];
  const newer = ev.attempt > task.attempt;
  // Its agent came back and reports that attempt's outcome: it did run, so the outcome stands.
  if (
    task.status === "RETRY" &&
    !newer &&
    ev.type === "finished" &&
    lostAttempt === ev.attempt &&
    ALLOWED.RUNNING.includes(ev.status)
  ) {
    return [
      { status: "RUNNING", reason: "agent_back" },
      { status: ev.status, reason: ev.reason ?? null },
    ];
  }
  const steps: Step[] = [];
  let status = task.status;
  if (status === "RUNNING" && newer) {
    steps.push({ status: "RETRY", reason: "redelivered" });
    status = "RETRY";
  }
  const target: TaskStatus = ev.type === "started" ? "RUNNING" : ev.type === "retry" ? "RETRY" : ev.status;
  const reason = ev.type === "started" ? null : (ev.reason ?? null);
  // A RETRY attempt starts again only with a later delivery; the same attempt is a duplicate.
  const mayStartAgain = status === "PENDING" || (status === "RETRY" && newer);
  if (target === "RUNNING") return mayStartAgain ? [...steps, { status: "RUNNING", reason }] : [];
  if (ALLOWED[status].includes(target)) return [...steps, { status: target, reason }];
  if (mayStartAgain && ALLOWED.RUNNING.includes(target)) {
    return [...steps, { status: "RUNNING", reason: "implied" }, { status: target, reason }];
  }
  return [];
}

/** Whether the coordinator itself may end a task in this status (cancel, expiry, failPending). */
export function mayEnd(from: TaskStatus, to: TaskStatus): boolean {
  if (to === "FAILED") return from === "PENDING" || from === "RETRY" || from === "RUNNING";
  return ALLOWED[from].includes(to);
}
