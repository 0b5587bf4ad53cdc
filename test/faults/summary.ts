// The fault suite's one summary line per case, and the checks every case
// shares: every accepted task reached exactly one
// final status (lost 0), and no result reached the caller twice
// (duplicated 0). Each case counts what it saw and hands the counts here, so
// the suite's output lists the same columns for every case:
//
//   fault-summary case="agent SIGKILL during map" accepted=2000 completed=2000 retried=41 lost=0 duplicated=0
//
// A case that also checks the results' values passes `wrong` (results the
// caller saw that are not the right answer): it must be 0 as well.

import assert from "node:assert/strict";
import { TERMINAL_STATUSES, type TaskStatus } from "../../shared/tasks.ts";

/** The statuses a task ends in (the spec's "Task statuses"); anything else is still on its way. */
export const isFinalStatus = (status: string): boolean => TERMINAL_STATUSES.has(status as TaskStatus);

export interface FaultCounts {
  /** Tasks the system accepted (the caller got a task id, or a map item was submitted). */
  accepted: number;
  /** Accepted tasks that reached a final status (success or failure). */
  completed: number;
  /** Accepted tasks that ran more than once (attempts > 1) on their way there. */
  retried: number;
  /** Accepted tasks with no final status at the end of the case: must be 0. */
  lost: number;
  /** Results the caller received more than once, or tasks with more than one final status: must be 0. */
  duplicated: number;
  /** Results the caller saw that are not the right answer: must be 0 (omit when the case has no answer to check). */
  wrong?: number;
}

/** The summary line, as printed: one line, `key=value` pairs, the case name quoted. */
export function faultSummaryLine(caseName: string, c: FaultCounts): string {
  const wrong = c.wrong === undefined ? "" : ` wrong=${c.wrong}`;
  return (
    `fault-summary case=${JSON.stringify(caseName)} accepted=${c.accepted} completed=${c.completed}` +
    ` retried=${c.retried} lost=${c.lost} duplicated=${c.duplicated}${wrong}`
  );
}

/**
 * Prints the case's summary line (as a test diagnostic when `t` is given,
 * else on stdout) and asserts the suite's promise:
 * nothing lost, nothing duplicated, nothing wrong, and every accepted task
 * accounted for as completed.
 */
export function assertFaultSummary(
  t: { diagnostic(message: string): void } | undefined,
  caseName: string,
  c: FaultCounts,
): void {
  const line = faultSummaryLine(caseName, c);
  // A test's diagnostic is in every reporter's output; stdout is the fallback without a test.
  if (t) t.diagnostic(line);
  else process.stdout.write(`${line}\n`);
  assert.equal(c.lost, 0, `${line}: accepted tasks were lost`);
  assert.equal(c.duplicated, 0, `${line}: results were duplicated`);
  if (c.wrong !== undefined) assert.equal(c.wrong, 0, `${line}: results were wrong`);
  assert.equal(c.completed, c.accepted, `${line}: not every accepted task reached a final status`);
  assert.ok(c.retried <= c.accepted, `${line}: more tasks retried than accepted`);
}

/** How many entries of `keys` repeat an earlier one (0 when all are distinct). */
export function countDuplicates(keys: Iterable<string>): number {
  const seen = new Set<string>();
  let dups = 0;
  for (const k of keys) {
    if (seen.has(k)) dups++;
    else seen.add(k);
  }
  return dups;
}

/** One accepted task as the case found it at the end: its status and how many times it ran. */
export interface SeenTask {
  id: string;
  status: string;
  /** Attempts started (1 when it ran once; 0 when it never started). */
  attempts: number;
  /** Final-status entries in its history, when the case read it (more than 1 is a duplicate). */
  finalEntries?: number;
}

/**
 * Counts for a set of accepted tasks read back at the end of a case:
 * completed = in a final status, lost = not, retried = attempts > 1,
 * duplicated = extra final-status history entries plus `duplicateResults`
 * (results the caller received twice, counted by the case, e.g. with countDuplicates).
 */
export function tallyTasks(
  tasks: readonly SeenTask[],
  extra: { duplicateResults?: number; wrong?: number } = {},
): FaultCounts {
  let completed = 0;
  let retried = 0;
  let extraFinals = 0;
  for (const task of tasks) {
    if (isFinalStatus(task.status)) completed++;
    if (task.attempts > 1) retried++;
    if (task.finalEntries !== undefined && task.finalEntries > 1) extraFinals += task.finalEntries - 1;
  }
  return {
    accepted: tasks.length,
    completed,
    retried,
    lost: tasks.length - completed,
    duplicated: extraFinals + (extra.duplicateResults ?? 0) + countDuplicates(tasks.map((t) => t.id)),
    ...(extra.wrong === undefined ? {} : { wrong: extra.wrong }),
  };
}
