import { type Kysely, type RawBuilder, sql } from "kysely";
import type { Engine } from "../store/index.ts";
import type { Database } from "../store/index.ts";

// Metrics rows and the time-series queries over them (docs/metrics.md). Every
// query groups rows into buckets `step` wide starting at `from`:
// bucket = (t - from) / step in integer arithmetic, the same on SQLite and
// PostgreSQL. Task rows keep ISO text times, turned into epoch ms by each
// engine's own date function.

export interface ContainerSampleRow {
  containerId: string;
  atMs: number;
  agentId: string;
  pool: string;
  workspaceId: string | null;
  stubId: string | null;
  cpuCores: number;
  memoryBytes: number;
  cpuLimitCores: number;
  memoryLimitBytes: number;
  gpuCount: number;
  gpuUtilization: number | null;
  gpuMemoryBytes: number | null;
}

export interface PoolSampleRow {
  pool: string;
  bucketMs: number;
  atMs: number;
  coordinatorId: string;
  agents: number;
  cpuCapacityCores: number;
  cpuAllocatedCores: number;
  cpuUsedCores: number;
  memoryCapacityBytes: number;
  memoryAllocatedBytes: number;
  memoryUsedBytes: number;
  gpuCapacity: number;
  gpuAllocated: number;
}

/** [fromMs, toMs) cut into buckets of stepMs; fromMs is the first bucket's start. */
export interface BucketRange {
  fromMs: number;
  toMs: number;
  stepMs: number;
}

export interface ContainerBucket {
  bucket: number;
  /** Containers with at least one sample in the bucket. */
  containers: number;
  /** Sum over containers of each one's mean in the bucket. */
  cpuCores: number;
  memoryBytes: number;
  /** Mean over containers that have GPU figures; null when none has. */
  gpuUtilization: number | null;
  gpuMemoryBytes: number | null;
}

export type PoolBucket = { pool: string; bucket: number } & Omit<
  PoolSampleRow,
  "pool" | "bucketMs" | "atMs" | "coordinatorId"
>;

export interface TaskCountBucket {
  bucket: number;
  status: string;
  count: number;
}

export interface TaskDurationBucket {
  bucket: number;
  /** Tasks that ended in the bucket having started (their run time is known). */
  count: number;
  avgMs: number;
  maxMs: number;
  /** The median, interpolated between the two middle values for an even count (PostgreSQL's percentile_cont(0.5)). */
  p50Ms: number;
}

export interface SampleScope {
  workspaceId: string;
  stubId?: string;
}

// Rows per INSERT: 14 columns, far below SQLite's 32766 bound parameters.
const INSERT_CHUNK = 500;

const num = (v: unknown): number => Number(v);
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export class MetricsRepo {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly engine: Engine,
  ) {}

  /** Writes samples; a sample already stored (same container and time) is left as it is. */
  async insertContainerSamples(rows: ContainerSampleRow[]): Promise<void> {
    for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
      await this.db
        .insertInto("container_samples")
        .values(
          rows.slice(i, i + INSERT_CHUNK).map((r) => ({
            container_id: r.containerId,
            at_ms: r.atMs,
            agent_id: r.agentId,
            pool: r.pool,
            workspace_id: r.workspaceId,
            stub_id: r.stubId,
            cpu_cores: r.cpuCores,
            memory_bytes: Math.round(r.memoryBytes),
            cpu_limit_cores: r.cpuLimitCores,
            memory_limit_bytes: Math.round(r.memoryLimitBytes),
            gpu_count: r.gpuCount,
            gpu_utilization: r.gpuUtilization,
            gpu_memory_bytes: r.gpuMemoryBytes === null ? null : Math.round(r.gpuMemoryBytes),
          })),
        )
        .onConflict((oc) => oc.columns(["container_id", "at_ms"]).doNothing())
        .execute();
    }
  }

  /**
   * Inserts the pool's sample for its interval unless one is there: the
   * first coordinator to write an interval wins, the others learn they lost.
   */
  async claimPoolSample(r: PoolSampleRow): Promise<boolean> {
    const res = await this.db
      .insertInto("pool_samples")
      .values({
        pool: r.pool,
        bucket_ms: r.bucketMs,
        at_ms: r.atMs,
        coordinator_id: r.coordinatorId,
        agents: r.agents,
        cpu_capacity_cores: r.cpuCapacityCores,
        cpu_allocated_cores: r.cpuAllocatedCores,
        cpu_used_cores: r.cpuUsedCores,
        memory_capacity_bytes: Math.round(r.memoryCapacityBytes),
        memory_allocated_bytes: Math.round(r.memoryAllocatedBytes),
        memory_used_bytes: Math.round(r.memoryUsedBytes),
        gpu_capacity: r.gpuCapacity,
        gpu_allocated: r.gpuAllocated,
      })
      .onConflict((oc) => oc.columns(["pool", "bucket_ms"]).doNothing())
      .executeTakeFirst();
    return Number(res.numInsertedOrUpdatedRows ?? 0) > 0;
  }

  /** Deletes samples older than `beforeMs`; returns how many of each. */
  async prune(beforeMs: number): Promise<{ containerSamples: number; poolSamples: number }> {
    const c = await this.db.deleteFrom("container_samples").where("at_ms", "<", beforeMs).executeTakeFirst();
    const p = await this.db.deleteFrom("pool_samples").where("bucket_ms", "<", beforeMs).executeTakeFirst();
    return { containerSamples: Number(c.numDeletedRows), poolSamples: Number(p.numDeletedRows) };
  }

  async containerSeries(scope: SampleScope, r: BucketRange): Promise<ContainerBucket[]> {
    const stub = scope.stubId === undefined ? sql`` : sql`AND stub_id = ${scope.stubId}`;
    const { rows } = await sql<Record<string, unknown>>`
      SELECT b, COUNT(*) AS containers, SUM(cpu) AS cpu, SUM(mem) AS mem, AVG(gu) AS gu, SUM(gm) AS gm
      FROM (
        SELECT ${bucketOf(sql`at_ms`, r)} AS b, container_id,
               AVG(cpu_cores) AS cpu, AVG(memory_bytes) AS mem,
               AVG(gpu_utilization) AS gu, AVG(gpu_memory_bytes) AS gm
        FROM container_samples
        WHERE workspace_id = ${scope.workspaceId} ${stub} AND at_ms >= ${r.fromMs} AND at_ms < ${r.toMs}
        GROUP BY b, container_id
      ) per_container
      GROUP BY b ORDER BY b`.execute(this.db);
    return rows.map((x) => ({
      bucket: num(x.b),
      containers: num(x.containers),
      cpuCores: num(x.cpu),
      memoryBytes: num(x.mem),
      gpuUtilization: numOrNull(x.gu),
      gpuMemoryBytes: numOrNull(x.gm),
    }));
  }

  /** Per pool and bucket, the mean of its samples. `pools` limits which pools; absent means all. */
  async poolSeries(r: BucketRange, pools?: string[]): Promise<PoolBucket[]> {
    if (pools && pools.length === 0) return [];
    const only = pools ? sql`AND pool IN (${sql.join(pools)})` : sql``;
    const { rows } = await sql<Record<string, unknown>>`
      SELECT pool, ${bucketOf(sql`bucket_ms`, r)} AS b,
             AVG(agents) AS agents,
             AVG(cpu_capacity_cores) AS cpu_cap, AVG(cpu_allocated_cores) AS cpu_alloc, AVG(cpu_used_cores) AS cpu_used,
             AVG(memory_capacity_bytes) AS mem_cap, AVG(memory_allocated_bytes) AS mem_alloc, AVG(memory_used_bytes) AS mem_used,
             AVG(gpu_capacity) AS gpu_cap, AVG(gpu_allocated) AS gpu_alloc
      FROM pool_samples
      WHERE bucket_ms >= ${r.fromMs} AND bucket_ms < ${r.toMs} ${only}
      GROUP BY pool, b ORDER BY pool, b`.execute(this.db);
    return rows.map((x) => ({
      pool: String(x.pool),
      bucket: num(x.b),
      agents: num(x.agents),
      cpuCapacityCores: num(x.cpu_cap),
      cpuAllocatedCores: num(x.cpu_alloc),
      cpuUsedCores: num(x.cpu_used),
      memoryCapacityBytes: num(x.mem_cap),
      memoryAllocatedBytes: num(x.mem_alloc),
      memoryUsedBytes: num(x.mem_used),
      gpuCapacity: num(x.gpu_cap),
      gpuAllocated: num(x.gpu_alloc),
    }));
  }

  /** The pools that have samples in the range. */
  async poolNames(r: BucketRange): Promise<string[]> {
    const rows = await this.db
      .selectFrom("pool_samples")
      .select("pool")
      .distinct()
      .where("bucket_ms", ">=", r.fromMs)
      .where("bucket_ms", "<", r.toMs)
      .orderBy("pool")
      .execute();
    return rows.map((x) => x.pool);
  }

  /** Tasks created in each bucket, by their status now. */
  async taskCounts(scope: SampleScope, r: BucketRange): Promise<TaskCountBucket[]> {
    const stub = scope.stubId === undefined ? sql`` : sql`AND stub_id = ${scope.stubId}`;
    const { rows } = await sql<Record<string, unknown>>`
      SELECT ${bucketOf(this.epochMs("created_at"), r)} AS b, status, COUNT(*) AS n
      FROM tasks
      WHERE workspace_id = ${scope.workspaceId} ${stub}
        AND created_at >= ${iso(r.fromMs)} AND created_at < ${iso(r.toMs)}
      GROUP BY b, status ORDER BY b, status`.execute(this.db);
    return rows.map((x) => ({ bucket: num(x.b), status: String(x.status), count: num(x.n) }));
  }

  /** Run times (ended_at - started_at) of tasks that ended in each bucket. */
  async taskDurations(scope: SampleScope, r: BucketRange): Promise<TaskDurationBucket[]> {
    const stub = scope.stubId === undefined ? sql`` : sql`AND stub_id = ${scope.stubId}`;
    const durations = sql`
      SELECT ${bucketOf(this.epochMs("ended_at"), r)} AS b,
             ${this.epochMs("ended_at")} - ${this.epochMs("started_at")} AS d
      FROM tasks
      WHERE workspace_id = ${scope.workspaceId} ${stub} AND started_at IS NOT NULL
        AND ended_at >= ${iso(r.fromMs)} AND ended_at < ${iso(r.toMs)}`;
    // The median by row numbers rather than percentile_cont, which SQLite lacks.
    const { rows } = await sql<Record<string, unknown>>`
      WITH durations AS (${durations}),
      ranked AS (
        SELECT b, d, ROW_NUMBER() OVER (PARTITION BY b ORDER BY d) AS rn, COUNT(*) OVER (PARTITION BY b) AS n
        FROM durations
      ),
      mid AS (
        SELECT b, AVG(d) AS p50 FROM ranked WHERE rn = (n + 1) / 2 OR rn = (n + 2) / 2 GROUP BY b
      )
      SELECT agg.b AS b, agg.n AS n, agg.avg_d AS avg_d, agg.max_d AS max_d, mid.p50 AS p50
      FROM (SELECT b, COUNT(*) AS n, AVG(d) AS avg_d, MAX(d) AS max_d FROM durations GROUP BY b) agg
      JOIN mid ON mid.b = agg.b
      ORDER BY agg.b`.execute(this.db);
    return rows.map((x) => ({
      bucket: num(x.b),
      count: num(x.n),
      avgMs: num(x.avg_d),
      maxMs: num(x.max_d),
      p50Ms: num(x.p50),
    }));
  }

  /** Every task in the store by status (the coordinator's /metrics). */
  async taskStatusCounts(): Promise<Record<string, number>> {
    const rows = await this.db
      .selectFrom("tasks")
      .select(["status", (eb) => eb.fn.countAll<number | string>().as("n")])
      .groupBy("status")
      .execute();
    return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
  }

  /** Epoch ms of an ISO 8601 text column, exact to the millisecond on both engines. */
  private epochMs(column: "created_at" | "started_at" | "ended_at"): RawBuilder<number> {
    const col = sql.ref(column);
    return this.engine === "postgres"
      ? sql<number>`CAST(ROUND(EXTRACT(EPOCH FROM CAST(${col} AS timestamptz)) * 1000) AS bigint)`
      : // julianday keeps ~0.02 ms of precision at today's dates; rounding makes it exact.
        sql<number>`CAST(ROUND((julianday(${col}) - 2440587.5) * 86400000.0) AS INTEGER)`;
  }
}

/** The bucket index of time expression `t` (ms); rows are filtered to [from, to), so it is never negative. */
function bucketOf(t: RawBuilder<unknown>, r: BucketRange): RawBuilder<number> {
  return sql<number>`CAST((${t} - ${r.fromMs}) / ${r.stepMs} AS INTEGER)`;
}

const iso = (ms: number) => new Date(ms).toISOString();
