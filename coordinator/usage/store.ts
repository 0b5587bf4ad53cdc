// The records a usage report reads (docs/usage.md): tasks and sandbox/pod
// containers that ran in a window, the stubs that say what they asked for,
// /v1 requests with their token counts, and the names the report shows.
// Read-only; the same queries on SQLite and PostgreSQL (times are ISO 8601
// text in both, so they compare as strings).

import { type Kysely, sql } from "kysely";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import type { Database } from "../store/index.ts";

/** One stretch of a container running work: a task's run or a sandbox's life. */
export interface RunRecord {
  kind: "task" | "sandbox";
  id: string;
  stubId: string;
  /** The API token whose request made it; null when none did. */
  tokenId: string | null;
  agentId: string | null;
  /** ISO 8601. */
  startedAt: string;
  /** ISO 8601; null while it runs. */
  endedAt: string | null;
}

/** The /v1 requests of one token to one deployment on one UTC day, summed. */
export interface InferenceRecord {
  tokenId: string | null;
  deploymentId: string | null;
  /** The day's midnight UTC, ms since epoch. */
  dayMs: number;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

export interface StubSizing {
  config: StubConfig;
  extra: StubExtra;
}

/** Rows per page of a scan: a long window is read in pages, never all at once. */
const PAGE = 2000;
/** Ids per `in (...)` list. */
const ID_CHUNK = 500;

const chunks = <T>(xs: T[], n: number): T[][] => {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += n) out.push(xs.slice(i, i + n));
  return out;
};

export class UsageRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** The workspace's task runs that overlap [from, to), page by page in (started_at, id) order. */
  async *taskRuns(workspaceId: string, from: string, to: string): AsyncGenerator<RunRecord[]> {
    let after: { at: string; id: string } | undefined;
    for (;;) {
      let q = this.db
        .selectFrom("tasks")
        .select(["id", "stub_id", "token_id", "agent_id", "started_at", "ended_at"])
        .where("workspace_id", "=", workspaceId)
        .where("started_at", "is not", null)
        .where("started_at", "<", to)
        .where((eb) => eb.or([eb("ended_at", "is", null), eb("ended_at", ">", from)]));
      if (after) {
        const a = after;
        q = q.where((eb) =>
          eb.or([eb("started_at", ">", a.at), eb.and([eb("started_at", "=", a.at), eb("id", ">", a.id)])]),
        );
      }
      const rows = await q.orderBy("started_at").orderBy("id").limit(PAGE).execute();
      if (rows.length === 0) return;
      yield rows.map((r) => ({
        kind: "task" as const,
        id: r.id,
        stubId: r.stub_id,
        tokenId: r.token_id,
        agentId: r.agent_id,
        startedAt: r.started_at as string,
        endedAt: r.ended_at,
      }));
      const last = rows[rows.length - 1] as (typeof rows)[number];
      if (rows.length < PAGE) return;
      after = { at: last.started_at as string, id: last.id };
    }
  }

  /** The workspace's sandbox and pod containers alive at some time in [from, to). */
  async sandboxRuns(workspaceId: string, from: string, to: string): Promise<RunRecord[]> {
    const rows = await this.db
      .selectFrom("sandboxes")
      .select(["id", "stub_id", "token_id", "agent_id", "created_at", "terminated_at"])
      .where("workspace_id", "=", workspaceId)
      .where("created_at", "<", to)
      .where((eb) => eb.or([eb("terminated_at", "is", null), eb("terminated_at", ">", from)]))
      .execute();
    return rows.map((r) => ({
      kind: "sandbox" as const,
      id: r.id,
      stubId: r.stub_id,
      tokenId: r.token_id,
      agentId: r.agent_id,
      startedAt: r.created_at,
      endedAt: r.terminated_at,
    }));
  }

  /**
   * The workspace's /v1 requests in [fromMs, toMs), summed in the database by
   * token, deployment and UTC day (a month of requests is a few rows here).
   * Integer division of the ms time is the day on both engines.
   */
  async inference(workspaceId: string, fromMs: number, toMs: number): Promise<InferenceRecord[]> {
    const day = sql<number | string>`at_ms / 86400000`;
    const prompt = sql<number>`coalesce(prompt_tokens, 0)`;
    const completion = sql<number>`coalesce(completion_tokens, 0)`;
    const rows = await this.db
      .selectFrom("inference_usage")
      .select((eb) => [
        "token_id",
        "deployment_id",
        day.as("day"),
        eb.fn.countAll<number | string>().as("requests"),
        eb.fn.sum<number | string>(prompt).as("prompt"),
        eb.fn.sum<number | string>(completion).as("completion"),
        eb.fn.sum<number | string>(sql`coalesce(total_tokens, ${prompt} + ${completion})`).as("total"),
      ])
      .where("workspace_id", "=", workspaceId)
      .where("at_ms", ">=", fromMs)
      .where("at_ms", "<", toMs)
      .groupBy(["token_id", "deployment_id", day])
      .execute();
    return rows.map((r) => ({
      tokenId: r.token_id,
      deploymentId: r.deployment_id,
      dayMs: Number(r.day) * 86_400_000,
      requests: Number(r.requests),
      promptTokens: Number(r.prompt ?? 0),
      completionTokens: Number(r.completion ?? 0),
      totalTokens: Number(r.total ?? 0),
    }));
  }

  /** What each stub asked for, by id. */
  async stubs(ids: string[]): Promise<Map<string, StubSizing>> {
    const out = new Map<string, StubSizing>();
    for (const part of chunks(ids, ID_CHUNK)) {
      const rows = await this.db
        .selectFrom("stubs")
        .select(["id", "config_json", "extra_json"])
        .where("id", "in", part)
        .execute();
      for (const r of rows)
        out.set(r.id, {
          config: JSON.parse(r.config_json) as StubConfig,
          extra: JSON.parse(r.extra_json) as StubExtra,
        });
    }
    return out;
  }

  /** The workspace's deployment versions: their id, stub and name. */
  async deployments(workspaceId: string): Promise<{ id: string; stubId: string | null; name: string }[]> {
    const rows = await this.db
      .selectFrom("deployments")
      .select(["id", "stub_id", "name"])
      .where("workspace_id", "=", workspaceId)
      .execute();
    return rows.map((r) => ({ id: r.id, stubId: r.stub_id, name: r.name }));
  }

  /** The names of the workspace's tokens (revoked ones too: their past usage still counts), by id. */
  async tokenNames(workspaceId: string): Promise<Map<string, string>> {
    const rows = await this.db
      .selectFrom("tokens")
      .select(["id", "name"])
      .where("workspace_id", "=", workspaceId)
      .execute();
    return new Map(rows.map((r) => [r.id, r.name]));
  }

  /** The GPU types each agent reports (its last capacity), by agent id. */
  async agentGpuTypes(ids: string[]): Promise<Map<string, string[]>> {
    const out = new Map<string, string[]>();
    for (const part of chunks(ids, ID_CHUNK)) {
      const rows = await this.db
        .selectFrom("agents")
        .select(["id", "capacity_json"])
        .where("id", "in", part)
        .execute();
      for (const r of rows) {
        let types: string[] = [];
        try {
          const cap = r.capacity_json
            ? (JSON.parse(r.capacity_json) as { gpus?: { devices?: { type?: string }[] } })
            : {};
          types = [...new Set((cap.gpus?.devices ?? []).map((d) => d.type ?? "").filter((t) => t))];
        } catch {
          // A capacity that does not parse tells no types: the task's first requested type is used.
        }
        out.set(r.id, types);
      }
    }
    return out;
  }

  /** Bytes of the workspace's code archives and sandbox snapshots, as recorded now. */
  async storedBytes(workspaceId: string): Promise<{ objects: number; snapshots: number }> {
    const sum = async (table: "objects" | "sandbox_images" | "sandbox_snapshots") => {
      const col = table === "objects" ? "size" : "size_bytes";
      const r = await this.db
        .selectFrom(table)
        .select((eb) => eb.fn.sum<number | string | null>(col).as("bytes"))
        .where("workspace_id", "=", workspaceId)
        .executeTakeFirst();
      return Number(r?.bytes ?? 0);
    };
    return {
      objects: await sum("objects"),
      snapshots: (await sum("sandbox_images")) + (await sum("sandbox_snapshots")),
    };
  }
}
