import type { Insertable, Kysely, Updateable } from "kysely";
import { TERMINAL_STATUSES, type TaskError, type TaskStatus } from "../../shared/tasks.ts";
import { QueryShapes } from "../store/index.ts";
import type { Database, TaskEventTable, TaskTable } from "../store/index.ts";

export interface TaskRecord {
  id: string;
  workspaceId: string;
  stubId: string;
  status: TaskStatus;
  attempt: number;
  containerId: string | null;
  agentId: string | null;
  streamSeq: number | null;
  headless: boolean;
  callbackUrl: string | null;
  /** ms since epoch; null = never expires. */
  expiresAt: number | null;
  error: TaskError | null;
  result: Buffer | null;
  resultJson: string | null;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  updatedAt: string;
  /** The API token whose request submitted it; null when none did (schedules, public endpoints). */
  tokenId: string | null;
}

export interface NewTask {
  id: string;
  workspaceId: string;
  stubId: string;
  headless: boolean;
  callbackUrl: string | null;
  expiresAt: number | null;
  createdAt: string;
  /** The API token whose request submits it. @default none (null) */
  tokenId?: string | null;
}

/** Columns a task event changes; absent = unchanged. */
export interface TaskPatch {
  status?: TaskStatus;
  attempt?: number;
  containerId?: string | null;
  agentId?: string | null;
  streamSeq?: number;
  error?: TaskError | null;
  result?: Buffer | null;
  resultJson?: string | null;
  startedAt?: string;
  endedAt?: string;
  updatedAt: string;
}

export interface TaskHistoryEntry {
  taskId: string;
  status: TaskStatus;
  attempt: number;
  containerId: string | null;
  reason: string | null;
  at: string;
}

export const LIVE_STATUSES: TaskStatus[] = ["PENDING", "RETRY", "RUNNING"];

/** Which of a workspace's tasks a list wants; absent fields do not filter. */
export interface TaskListFilter {
  /** Any of these statuses. */
  statuses?: TaskStatus[];
  /** Any of these stubs (an empty list matches nothing). */
  stubIds?: string[];
  /** ISO 8601 (UTC, as created_at is stored): created strictly after / before. */
  createdAfter?: string;
  createdBefore?: string;
}

export interface TaskListPage {
  limit: number;
  /** Keyset position: the (created_at, id) of the last task of the previous page. */
  after?: { createdAt: string; id: string };
}

// Rows per multi-row INSERT: a batch of up to this many is one statement, and
// at most this many statement shapes (one per row count) are kept per table.
// SQLite allows 32766 bound parameters per statement; tasks rows have 19 columns.
const INSERT_CHUNK = 64;
/** Ids per read of endedAmong (SQLite binds at most 32,766 parameters per statement). */
const ENDED_READ_CHUNK = 500;

const TASK_COLUMNS = [
  "id",
  "workspace_id",
  "stub_id",
  "status",
  "attempt",
  "container_id",
  "agent_id",
  "stream_seq",
  "headless",
  "callback_url",
  "expires_at",
  "error_json",
  "result",
  "result_json",
  "created_at",
  "started_at",
  "ended_at",
  "updated_at",
  "token_id",
] as const;

/** What a list reads: every column but the results. */
const LIST_COLUMNS = TASK_COLUMNS.filter(
  (c): c is Exclude<(typeof TASK_COLUMNS)[number], "result" | "result_json"> =>
    c !== "result" && c !== "result_json",
);

const EVENT_COLUMNS = ["task_id", "status", "attempt", "container_id", "reason", "at"] as const;

/** A whole tasks row, in TASK_COLUMNS order. */
function taskValues(t: TaskRecord): unknown[] {
  return [
    t.id,
    t.workspaceId,
    t.stubId,
    t.status,
    t.attempt,
    t.containerId,
    t.agentId,
    t.streamSeq,
    t.headless ? 1 : 0,
    t.callbackUrl,
    t.expiresAt === null ? null : new Date(t.expiresAt).toISOString(),
    t.error ? JSON.stringify(t.error) : null,
    t.result,
    t.resultJson,
    t.createdAt,
    t.startedAt,
    t.endedAt,
    t.updatedAt,
    t.tokenId,
  ];
}

const eventValues = (h: TaskHistoryEntry): unknown[] => [
  h.taskId,
  h.status,
  h.attempt,
  h.containerId,
  h.reason,
  h.at,
];

/** The record of a task just created (PENDING, nothing run yet). */
export function newTaskRecord(n: NewTask): TaskRecord {
  return {
    ...n,
    tokenId: n.tokenId ?? null,
    status: "PENDING",
    attempt: 0,
    containerId: null,
    agentId: null,
    streamSeq: null,
    startedAt: null,
    endedAt: null,
    updatedAt: n.createdAt,
    error: null,
    result: null,
    resultJson: null,
  };
}

const zip = (columns: readonly string[], values: unknown[], from: number): Record<string, unknown> => {
  const row: Record<string, unknown> = {};
  for (let i = 0; i < columns.length; i++) row[columns[i] as string] = values[from + i];
  return row;
};

const toTask = (r: Database["tasks"]): TaskRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  stubId: r.stub_id,
  status: r.status as TaskStatus,
  attempt: Number(r.attempt),
  containerId: r.container_id,
  agentId: r.agent_id,
  streamSeq: r.stream_seq === null ? null : Number(r.stream_seq),
  headless: Number(r.headless) === 1,
  callbackUrl: r.callback_url,
  expiresAt: r.expires_at ? Date.parse(r.expires_at) : null,
  error: r.error_json ? (JSON.parse(r.error_json) as TaskError) : null,
  result: r.result ? Buffer.from(r.result) : null,
  resultJson: r.result_json,
  createdAt: r.created_at,
  startedAt: r.started_at,
  endedAt: r.ended_at,
  updatedAt: r.updated_at,
  tokenId: r.token_id ?? null,
});

/** Final statuses (shared/tasks.ts TERMINAL_STATUSES), in a fixed order for the statement's parameters. */
const ENDED: TaskStatus[] = [...TERMINAL_STATUSES].sort();

/** The columns a patch sets, in a fixed order, and their values. */
function patchColumns(p: TaskPatch): { columns: string[]; values: unknown[] } {
  const columns: string[] = [];
  const values: unknown[] = [];
  const set = (c: string, v: unknown) => {
    columns.push(c);
    values.push(v);
  };
  if (p.status !== undefined) set("status", p.status);
  if (p.attempt !== undefined) set("attempt", p.attempt);
  if (p.containerId !== undefined) set("container_id", p.containerId);
  if (p.agentId !== undefined) set("agent_id", p.agentId);
  if (p.streamSeq !== undefined) set("stream_seq", p.streamSeq);
  if (p.error !== undefined) set("error_json", p.error ? JSON.stringify(p.error) : null);
  if (p.result !== undefined) set("result", p.result);
  if (p.resultJson !== undefined) set("result_json", p.resultJson);
  if (p.startedAt !== undefined) set("started_at", p.startedAt);
  if (p.endedAt !== undefined) set("ended_at", p.endedAt);
  set("updated_at", p.updatedAt);
  return { columns, values };
}

type Db = Kysely<Database>;

export class TaskRepo {
  // Statements of the task path are compiled once per shape (QueryShapes).
  private readonly shapes = new QueryShapes();

  constructor(private readonly db: Db) {}

  /** Inserts new PENDING tasks, all in one transaction. */
  async insertMany(tasks: NewTask[]): Promise<void> {
    if (tasks.length === 0) return;
    await this.db.transaction().execute((trx) => this.insertRows(trx, tasks.map(newTaskRecord)));
  }

  /**
   * Writes a batch in one transaction: whole rows first (`inserts`: tasks
   * written for the first time), then row changes, then history entries.
   *
   * A task ends once in the store. With several coordinators two may write
   * one task, each having applied one of its events: a status change never
   * lands on a row another already ended, and that task's history entries of
   * this batch are dropped with it. So a task that ran twice (its delivery's
   * ack lost, say, while a NATS node stopped) keeps the first final status,
   * result and history entry written. Answers the ids whose change was dropped.
   */
  async applyBatch(
    patches: Map<string, TaskPatch>,
    history: TaskHistoryEntry[],
    inserts: TaskRecord[] = [],
  ): Promise<Set<string>> {
    const dropped = new Set<string>();
    if (patches.size === 0 && history.length === 0 && inserts.length === 0) return dropped;
    await this.db.transaction().execute(async (trx) => {
      await this.insertRows(trx, inserts);
      for (const [id, p] of patches) {
        const { columns, values } = patchColumns(p);
        values.push(id);
        const guarded = p.status !== undefined;
        if (guarded) values.push(...ENDED);
        const r = await this.shapes.run(
          trx,
          `update tasks ${columns.join(",")}${guarded ? " while open" : ""}`,
          values,
          () => {
            const q = trx
              .updateTable("tasks")
              .set(zip(columns, values, 0) as Updateable<TaskTable>)
              .where("id", "=", id);
            return guarded ? q.where("status", "not in", ENDED) : q;
          },
        );
        if (guarded && r.numAffectedRows === BigInt(0)) dropped.add(id);
      }
      const kept = dropped.size === 0 ? history : history.filter((h) => !dropped.has(h.taskId));
      await this.insertChunks(trx, "task_events", EVENT_COLUMNS, kept.map(eventValues));
    });
    return dropped;
  }

  async get(id: string): Promise<TaskRecord | undefined> {
    const r = await this.shapes.run(this.db, "get task", [id], () =>
      this.db.selectFrom("tasks").selectAll().where("id", "=", id),
    );
    const row = r.rows[0];
    return row && toTask(row);
  }

  private insertRows(db: Db, rows: TaskRecord[]): Promise<void> {
    return this.insertChunks(db, "tasks", TASK_COLUMNS, rows.map(taskValues));
  }

  /** Multi-row INSERTs of up to INSERT_CHUNK rows each. */
  private async insertChunks(
    db: Db,
    table: "tasks" | "task_events",
    columns: readonly string[],
    rows: unknown[][],
  ): Promise<void> {
    for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
      const chunk = rows.slice(i, i + INSERT_CHUNK);
      const params = chunk.length === 1 ? (chunk[0] as unknown[]) : chunk.flat();
      await this.shapes.run(db, `insert ${table} ${chunk.length}`, params, () =>
        db
          .insertInto(table)
          .values(
            chunk.map((v) => zip(columns, v, 0)) as Insertable<TaskTable>[] & Insertable<TaskEventTable>[],
          ),
      );
    }
  }

  async history(taskId: string): Promise<TaskHistoryEntry[]> {
    const rows = await this.db
      .selectFrom("task_events")
      .selectAll()
      .where("task_id", "=", taskId)
      .orderBy("id")
      .execute();
    return rows.map((r) => ({
      taskId: r.task_id,
      status: r.status as TaskStatus,
      attempt: Number(r.attempt),
      containerId: r.container_id,
      reason: r.reason,
      at: r.at,
    }));
  }

  /**
   * A workspace's tasks, newest first (created_at, then id, descending),
   * at most `page.limit` of them after the keyset position. Results and
   * errors stay in the store: a list carries no payloads.
   */
  async list(workspaceId: string, f: TaskListFilter, page: TaskListPage): Promise<TaskRecord[]> {
    if (f.stubIds?.length === 0 || f.statuses?.length === 0) return [];
    let q = this.db.selectFrom("tasks").select(LIST_COLUMNS).where("workspace_id", "=", workspaceId);
    if (f.statuses) q = q.where("status", "in", f.statuses);
    if (f.stubIds) q = q.where("stub_id", "in", f.stubIds);
    if (f.createdAfter !== undefined) q = q.where("created_at", ">", f.createdAfter);
    if (f.createdBefore !== undefined) q = q.where("created_at", "<", f.createdBefore);
    const after = page.after;
    if (after) {
      q = q.where((eb) =>
        eb.or([
          eb("created_at", "<", after.createdAt),
          eb.and([eb("created_at", "=", after.createdAt), eb("id", "<", after.id)]),
        ]),
      );
    }
    const rows = await q.orderBy("created_at", "desc").orderBy("id", "desc").limit(page.limit).execute();
    return rows.map((r) => toTask({ ...r, result: null, result_json: null }));
  }

  /**
   * Open tasks (PENDING, RETRY, RUNNING) created before `createdBefore` (ISO)
   * whose stub's type is one of `stubTypes`, oldest first, at most `limit`:
   * the direct tasks a coordinator checks for a dead owner
   * (coordinator/tasks/direct-orphans.ts).
   */
  async listOpenOfStubTypes(stubTypes: string[], createdBefore: string, limit = 1000): Promise<TaskRecord[]> {
    if (stubTypes.length === 0) return [];
    const rows = await this.db
      .selectFrom("tasks")
      .innerJoin("stubs", "stubs.id", "tasks.stub_id")
      .selectAll("tasks")
      .where("tasks.status", "in", LIVE_STATUSES)
      .where("stubs.type", "in", stubTypes)
      .where("tasks.created_at", "<", createdBefore)
      .orderBy("tasks.created_at")
      .limit(limit)
      .execute();
    return rows.map(toTask);
  }

  /**
   * Ends an open task in one transaction: its row takes `status`, `error` and
   * the end time only while it is still open, and its history entry is
   * written only then. False when the task had already ended (or has no
   * row): two coordinators ending the same task write one final entry.
   */
  async endIfOpen(entry: TaskHistoryEntry, error: TaskError | null): Promise<boolean> {
    if (!ENDED.includes(entry.status)) throw new Error(`endIfOpen: ${entry.status} is not a final status`);
    return this.db.transaction().execute(async (trx) => {
      const r = await trx
        .updateTable("tasks")
        .set({
          status: entry.status,
          error_json: error ? JSON.stringify(error) : null,
          ended_at: entry.at,
          updated_at: entry.at,
        })
        .where("id", "=", entry.taskId)
        .where("status", "in", LIVE_STATUSES)
        .executeTakeFirst();
      if (Number(r.numUpdatedRows) !== 1) return false;
      await trx
        .insertInto("task_events")
        .values(zip(EVENT_COLUMNS, eventValues(entry), 0) as Insertable<TaskEventTable>)
        .execute();
      return true;
    });
  }

  /** The rows of those of `ids` that have ended (any order), read in chunks. */
  async endedAmong(ids: readonly string[]): Promise<TaskRecord[]> {
    const out: TaskRecord[] = [];
    for (let i = 0; i < ids.length; i += ENDED_READ_CHUNK) {
      const rows = await this.db
        .selectFrom("tasks")
        .selectAll()
        .where("id", "in", ids.slice(i, i + ENDED_READ_CHUNK))
        .where("status", "in", ENDED)
        .execute();
      for (const r of rows) out.push(toTask(r));
    }
    return out;
  }

  /** Tasks not yet finished (PENDING, RETRY, RUNNING), without results: what a restarting coordinator tracks. */
  async listLive(): Promise<TaskRecord[]> {
    const rows = await this.db
      .selectFrom("tasks")
      .selectAll()
      .where("status", "in", LIVE_STATUSES)
      .orderBy("created_at")
      .execute();
    return rows.map(toTask);
  }
}
