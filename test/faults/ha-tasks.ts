// What the fault cases of several coordinators (test/faults/ha.test.ts) read
// of their tasks from the coordinators' PostgreSQL store, and the summary
// each case ends with: its tasks' rows, their final-status history entries
// (a second one is a duplicated result), tallied and asserted.

import type pg from "pg";
import { waitFor } from "../../shared/net.ts";
import { TERMINAL_STATUSES } from "../../shared/tasks.ts";
import { assertFaultSummary, countDuplicates, isFinalStatus, tallyTasks } from "./summary.ts";

/** A task's row as the summary reads it. */
export interface StoreTaskRow {
  id: string;
  status: string;
  attempt: number;
}

/** The tasks of the stubs whose name is like `nameLike` (SQL LIKE). */
export async function taskRowsOfStubs(db: pg.Client, nameLike: string): Promise<StoreTaskRow[]> {
  const res = await db.query(
    "select t.id, t.status, t.attempt from tasks t join stubs s on s.id = t.stub_id where s.name like $1",
    [nameLike],
  );
  return res.rows as StoreTaskRow[];
}

/**
 * The rows `read` returns once every one has its final status (and there are
 * at least `atLeast`), else as they stand after `timeoutMs`: the summary then
 * counts what did not end.
 */
export async function rowsOnceFinal<R extends { status: string }>(
  read: () => Promise<R[]>,
  what: string,
  { timeoutMs = 120_000, atLeast = 0 }: { timeoutMs?: number; atLeast?: number } = {},
): Promise<R[]> {
  await waitFor(
    async () => {
      const rows = await read();
      return rows.length >= atLeast && rows.every((r) => isFinalStatus(r.status));
    },
    { timeoutMs, what },
  ).catch(() => undefined);
  return read();
}

/**
 * Reads the final-status history entries of `rows` and asserts the case's
 * summary (nothing lost, duplicated or wrong: summary.ts assertFaultSummary).
 */
export async function assertStoreSummary(
  t: { diagnostic(message: string): void },
  db: pg.Client,
  caseName: string,
  rows: readonly StoreTaskRow[],
  wrong: number,
): Promise<void> {
  const finals = (
    await db.query("select task_id from task_events where task_id = any($1) and status = any($2)", [
      rows.map((r) => r.id),
      [...TERMINAL_STATUSES],
    ])
  ).rows as { task_id: string }[];
  assertFaultSummary(
    t,
    caseName,
    tallyTasks(
      rows.map((r) => ({ id: r.id, status: r.status, attempts: r.attempt })),
      { duplicateResults: countDuplicates(finals.map((h) => h.task_id)), wrong },
    ),
  );
}
