// Hosted inference records (docs/inference.md): one usage row per /v1
// request, and the public model catalog (deployments operators publish to
// every workspace, by name: the latest active version serves).

import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import type { Database } from "../store/index.ts";

export interface UsageRecord {
  workspaceId: string;
  tokenId: string | null;
  model: string;
  /** chat.completions | completions | embeddings | invoke */
  route: string;
  deploymentId: string | null;
  taskId: string | null;
  stream: boolean;
  /** The HTTP status the caller got (499: it went away first). */
  status: number;
  errorCode: string | null;
  /** As the model server reported them (its `usage`); null when it reported none. */
  promptTokens: number | null;
  completionTokens: number | null;
  totalTokens: number | null;
  /** Request start to the first byte of the answer's body (the first token of a stream). */
  ttftMs: number | null;
  durationMs: number;
  /** ms since epoch: when the request arrived. */
  atMs: number;
}

export interface UsageRow extends UsageRecord {
  id: string;
}

export interface UsageQuery {
  /** ms since epoch, inclusive. */
  sinceMs?: number;
  untilMs?: number;
  model?: string;
  /** Newest first; at most this many rows. */
  limit: number;
}

export interface UsageTotals {
  requests: number;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

export interface CatalogEntryRow {
  workspaceId: string;
  deploymentName: string;
  publishedAt: string;
}

/** 16 parameters a row: 500 rows stay under SQLite's (32,766) and PostgreSQL's (65,535) limits. */
export const USAGE_ROWS_PER_INSERT = 500;

const usageValues = (id: string, r: UsageRecord) => ({
  id,
  workspace_id: r.workspaceId,
  token_id: r.tokenId,
  model: r.model,
  route: r.route,
  deployment_id: r.deploymentId,
  task_id: r.taskId,
  stream: r.stream ? 1 : 0,
  status: r.status,
  error_code: r.errorCode,
  prompt_tokens: r.promptTokens,
  completion_tokens: r.completionTokens,
  total_tokens: r.totalTokens,
  ttft_ms: r.ttftMs === null ? null : Math.round(r.ttftMs),
  duration_ms: Math.round(r.durationMs),
  at_ms: r.atMs,
});

const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export class InferenceRepo {
  /** Rows queued to be written (the gateway's UsageWriter); reads write them first. */
  private queued: { flush(): Promise<void> } | undefined;

  constructor(private readonly db: Kysely<Database>) {}

  /**
   * Usage rows of this coordinator's gateway wait in `queue` to be written
   * together: usage() and totals() write them first, so a read shows every
   * request that has ended. A failed write is left to the queue's own retry.
   */
  readsWriteFirst(queue: { flush(): Promise<void> }): void {
    this.queued = queue;
  }

  private async writeQueued(): Promise<void> {
    await this.queued?.flush().catch(() => {});
  }

  async recordUsage(r: UsageRecord): Promise<string> {
    const [id] = await this.recordUsageRows([r]);
    return id as string;
  }

  /**
   * Up to USAGE_ROWS_PER_INSERT rows in one statement (all or none): the
   * gateway's batched writer (coordinator/inference/usage-writer.ts).
   */
  async recordUsageRows(rows: readonly UsageRecord[]): Promise<string[]> {
    if (rows.length > USAGE_ROWS_PER_INSERT)
      throw new RangeError(`at most ${USAGE_ROWS_PER_INSERT} usage rows a statement, got ${rows.length}`);
    const ids = rows.map(() => `inf-${randomUUID().replace(/-/g, "")}`);
    if (rows.length === 0) return ids;
    await this.db
      .insertInto("inference_usage")
      .values(rows.map((r, i) => usageValues(ids[i] as string, r)))
      .execute();
    return ids;
  }

  private filtered(workspaceId: string, q: Omit<UsageQuery, "limit">) {
    let s = this.db.selectFrom("inference_usage").where("workspace_id", "=", workspaceId);
    if (q.sinceMs !== undefined) s = s.where("at_ms", ">=", q.sinceMs);
    if (q.untilMs !== undefined) s = s.where("at_ms", "<", q.untilMs);
    if (q.model !== undefined) s = s.where("model", "=", q.model);
    return s;
  }

  async usage(workspaceId: string, q: UsageQuery): Promise<UsageRow[]> {
    await this.writeQueued();
    const rows = await this.filtered(workspaceId, q)
      .selectAll()
      .orderBy("at_ms", "desc")
      .orderBy("id", "desc")
      .limit(q.limit)
      .execute();
    return rows.map((r) => ({
      id: r.id,
      workspaceId: r.workspace_id,
      tokenId: r.token_id,
      model: r.model,
      route: r.route,
      deploymentId: r.deployment_id,
      taskId: r.task_id,
      stream: Number(r.stream) === 1,
      status: Number(r.status),
      errorCode: r.error_code,
      promptTokens: numOrNull(r.prompt_tokens),
      completionTokens: numOrNull(r.completion_tokens),
      totalTokens: numOrNull(r.total_tokens),
      ttftMs: numOrNull(r.ttft_ms),
      durationMs: Number(r.duration_ms),
      atMs: Number(r.at_ms),
    }));
  }

  async totals(workspaceId: string, q: Omit<UsageQuery, "limit">): Promise<UsageTotals> {
    await this.writeQueued();
    const r = await this.filtered(workspaceId, q)
      .select((eb) => [
        eb.fn.countAll().as("requests"),
        eb.fn.sum("prompt_tokens").as("prompt"),
        eb.fn.sum("completion_tokens").as("completion"),
        eb.fn.sum("total_tokens").as("total"),
      ])
      .executeTakeFirst();
    return {
      requests: Number(r?.requests ?? 0),
      promptTokens: Number(r?.prompt ?? 0),
      completionTokens: Number(r?.completion ?? 0),
      totalTokens: Number(r?.total ?? 0),
    };
  }

  async catalog(): Promise<CatalogEntryRow[]> {
    const rows = await this.db.selectFrom("model_catalog").selectAll().orderBy("published_at").execute();
    return rows.map((r) => ({
      workspaceId: r.workspace_id,
      deploymentName: r.deployment_name,
      publishedAt: r.published_at,
    }));
  }

  async publish(workspaceId: string, deploymentName: string, at: string): Promise<void> {
    await this.db
      .insertInto("model_catalog")
      .values({ workspace_id: workspaceId, deployment_name: deploymentName, published_at: at })
      .onConflict((oc) => oc.columns(["workspace_id", "deployment_name"]).doNothing())
      .execute();
  }

  async unpublish(workspaceId: string, deploymentName: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom("model_catalog")
      .where("workspace_id", "=", workspaceId)
      .where("deployment_name", "=", deploymentName)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }
}
