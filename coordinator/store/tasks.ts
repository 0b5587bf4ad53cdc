import type { Kysely } from "kysely";
import type { TaskError, TaskStatus } from "../../shared/tasks.ts";
import type { Database } from "./schema.ts";

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
}

export interface NewTask {
  id: string;
  workspaceId: string;
  stubId: string;
  headless: boolean;
  callbackUrl: string | null;
  expiresAt: number | null;
  createdAt: string;
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

// SQLite allows 32766 bound parameters per statement; tasks rows have 18 columns.
const INSERT_CHUNK = 500;

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
});

function patchColumns(p: TaskPatch) {
  return {
    ...(p.status !== undefined ? { status: p.status } : {}),
    ...(p.attempt !== undefined ? { attempt: p.attempt } : {}),
    ...(p.containerId !== undefined ? { container_id: p.containerId } : {}),
    ...(p.agentId !== undefined ? { agent_id: p.agentId } : {}),
    ...(p.streamSeq !== undefined ? { stream_seq: p.streamSeq } : {}),
    ...(p.error !== undefined ? { error_json: p.error ? JSON.stringify(p.error) : null } : {}),
    ...(p.result !== undefined ? { result: p.result } : {}),
    ...(p.resultJson !== undefined ? { result_json: p.resultJson } : {}),
    ...(p.startedAt !== undefined ? { started_at: p.startedAt } : {}),
    ...(p.endedAt !== undefined ? { ended_at: p.endedAt } : {}),
    updated_at: p.updatedAt,
  };
}

export class TaskRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** Inserts new PENDING tasks, all in one transaction. */
  async insertMany(tasks: NewTask[]): Promise<void> {
    const rows = tasks.map((t) => ({
      id: t.id,
      workspace_id: t.workspaceId,
      stub_id: t.stubId,
      status: "PENDING",
      attempt: 0,
      headless: t.headless ? 1 : 0,
      callback_url: t.callbackUrl,
      expires_at: t.expiresAt === null ? null : new Date(t.expiresAt).toISOString(),
      created_at: t.createdAt,
      updated_at: t.createdAt,
    }));
    await this.db.transaction().execute(async (trx) => {
      for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
        await trx
          .insertInto("tasks")
          .values(rows.slice(i, i + INSERT_CHUNK))
          .execute();
      }
    });
  }

  /** Writes a batch of task changes and history entries in one transaction. */
  async applyBatch(patches: Map<string, TaskPatch>, history: TaskHistoryEntry[]): Promise<void> {
    if (patches.size === 0 && history.length === 0) return;
    await this.db.transaction().execute(async (trx) => {
      for (const [id, p] of patches) {
        await trx.updateTable("tasks").set(patchColumns(p)).where("id", "=", id).execute();
      }
      for (let i = 0; i < history.length; i += INSERT_CHUNK) {
        await trx
          .insertInto("task_events")
          .values(
            history.slice(i, i + INSERT_CHUNK).map((h) => ({
              task_id: h.taskId,
              status: h.status,
              attempt: h.attempt,
              container_id: h.containerId,
              reason: h.reason,
              at: h.at,
            })),
          )
          .execute();
      }
    });
  }

  async get(id: string): Promise<TaskRecord | undefined> {
    const r = await this.db.selectFrom("tasks").selectAll().where("id", "=", id).executeTakeFirst();
    return r && toTask(r);
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
