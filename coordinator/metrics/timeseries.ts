import { BerthError } from "../../shared/errors.ts";
import { TASK_STATUSES } from "../../shared/tasks.ts";
import type { BucketRange, MetricsRepo, PoolBucket, SampleScope } from "./store.ts";

// The three time-series answers of the metrics routes (docs/metrics.md):
// parse `from`, `to`, `step`; query the store; lay every series out over
// every bucket, so clients can plot without filling gaps. Gauges read null
// where a bucket has no sample; counts read 0.

export const MAX_BUCKETS = 1440;
export const DEFAULT_RANGE_MS = 3_600_000;
export const DEFAULT_STEP_S = 60;

export type Point = [string, number | null];

export interface Series {
  name: string;
  unit: string;
  labels?: Record<string, string>;
  points: Point[];
}

export interface TimeseriesResponse {
  from: string;
  to: string;
  step_seconds: number;
  series: Series[];
}

export interface RangeQuery {
  from?: string;
  to?: string;
  step?: string;
}

/** A time: ISO 8601 or unix seconds. */
function parseTime(name: string, v: string): number {
  const ms = /^\d+(\.\d+)?$/.test(v) ? Number(v) * 1000 : Date.parse(v);
  if (!Number.isFinite(ms)) {
    throw new BerthError(
      "invalid_request",
      `${name} ${JSON.stringify(v)} is not an ISO 8601 time or unix seconds`,
    );
  }
  return Math.floor(ms);
}

const UNIT_S: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** Seconds: a whole number, or one with a unit (30s, 5m, 1h, 1d). */
function parseStep(v: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(v.trim());
  const s = m ? Number(m[1]) * (UNIT_S[m[2] || "s"] ?? 1) : Number.NaN;
  if (!Number.isInteger(s) || s < 1) {
    throw new BerthError(
      "invalid_request",
      `step ${JSON.stringify(v)} must be whole seconds, e.g. 60, 30s, 5m, 1h`,
    );
  }
  return s;
}

/**
 * The buckets a query asks for. Buckets start on multiples of step since the
 * epoch, so the same step always cuts time the same way; `from` is moved back
 * to its bucket's start. More than MAX_BUCKETS is refused with the numbers.
 */
export function parseRange(q: RangeQuery, now: number): BucketRange {
  const toMs = q.to !== undefined ? parseTime("to", q.to) : now;
  const fromRaw = q.from !== undefined ? parseTime("from", q.from) : toMs - DEFAULT_RANGE_MS;
  const stepS = q.step !== undefined ? parseStep(q.step) : DEFAULT_STEP_S;
  if (fromRaw >= toMs) throw new BerthError("invalid_request", "from must be before to");
  const stepMs = stepS * 1000;
  const fromMs = Math.floor(fromRaw / stepMs) * stepMs;
  const buckets = Math.ceil((toMs - fromMs) / stepMs);
  if (buckets > MAX_BUCKETS) {
    throw new BerthError(
      "invalid_request",
      `the range holds ${buckets} buckets of ${stepS} s; at most ${MAX_BUCKETS}: widen step to at least ${Math.ceil((toMs - fromMs) / 1000 / MAX_BUCKETS)} s or narrow the range`,
    );
  }
  return { fromMs, toMs, stepMs };
}

export const bucketCount = (r: BucketRange) => Math.ceil((r.toMs - r.fromMs) / r.stepMs);

function dense(r: BucketRange, values: Map<number, number | null>, missing: number | null): Point[] {
  const out: Point[] = [];
  for (let b = 0; b < bucketCount(r); b++) {
    out.push([
      new Date(r.fromMs + b * r.stepMs).toISOString(),
      values.has(b) ? (values.get(b) ?? null) : missing,
    ]);
  }
  return out;
}

function series<T extends { bucket: number }>(
  r: BucketRange,
  rows: T[],
  name: string,
  unit: string,
  value: (row: T) => number | null,
  missing: number | null,
  labels?: Record<string, string>,
): Series {
  const values = new Map(rows.map((row) => [row.bucket, value(row)]));
  return { name, unit, ...(labels ? { labels } : {}), points: dense(r, values, missing) };
}

const round = (n: number | null, digits = 3) =>
  n === null ? null : Math.round(n * 10 ** digits) / 10 ** digits;

async function containerAndTaskSeries(
  repo: MetricsRepo,
  scope: SampleScope,
  r: BucketRange,
): Promise<Series[]> {
  const [samples, counts] = await Promise.all([repo.containerSeries(scope, r), repo.taskCounts(scope, r)]);
  const out: Series[] = [
    series(r, samples, "containers", "count", (x) => x.containers, 0),
    series(r, samples, "cpu_cores", "cores", (x) => round(x.cpuCores), null),
    series(r, samples, "memory_bytes", "bytes", (x) => Math.round(x.memoryBytes), null),
    series(r, samples, "gpu_utilization", "percent", (x) => round(x.gpuUtilization, 1), null),
    series(
      r,
      samples,
      "gpu_memory_bytes",
      "bytes",
      (x) => (x.gpuMemoryBytes === null ? null : Math.round(x.gpuMemoryBytes)),
      null,
    ),
  ];
  for (const status of TASK_STATUSES) {
    const rows = counts.filter((c) => c.status === status);
    out.push(series(r, rows, "tasks_created", "count", (x) => x.count, 0, { status }));
  }
  return out;
}

/** One stub: its containers' use, its tasks by status, and its task run times. */
export async function stubTimeseries(
  repo: MetricsRepo,
  scope: Required<SampleScope>,
  r: BucketRange,
): Promise<Series[]> {
  const [base, durations] = await Promise.all([
    containerAndTaskSeries(repo, scope, r),
    repo.taskDurations(scope, r),
  ]);
  return [
    ...base,
    series(r, durations, "tasks_finished", "count", (x) => x.count, 0),
    series(r, durations, "task_duration_p50", "ms", (x) => round(x.p50Ms, 1), null),
    series(r, durations, "task_duration_avg", "ms", (x) => round(x.avgMs, 1), null),
    series(r, durations, "task_duration_max", "ms", (x) => x.maxMs, null),
  ];
}

/** The workspace's totals over all its stubs. */
export function workspaceTimeseries(
  repo: MetricsRepo,
  workspaceId: string,
  r: BucketRange,
): Promise<Series[]> {
  return containerAndTaskSeries(repo, { workspaceId }, r);
}

const POOL_FIELDS: [keyof PoolBucket, string, string][] = [
  ["agents", "agents", "count"],
  ["cpuCapacityCores", "cpu_capacity", "cores"],
  ["cpuAllocatedCores", "cpu_allocated", "cores"],
  ["cpuUsedCores", "cpu_used", "cores"],
  ["memoryCapacityBytes", "memory_capacity", "bytes"],
  ["memoryAllocatedBytes", "memory_allocated", "bytes"],
  ["memoryUsedBytes", "memory_used", "bytes"],
  ["gpuCapacity", "gpu_capacity", "count"],
  ["gpuAllocated", "gpu_allocated", "count"],
];

/** Capacity vs allocation vs use of each pool, one series per pool and figure (label `pool`). */
export async function poolTimeseries(repo: MetricsRepo, r: BucketRange, pools?: string[]): Promise<Series[]> {
  const rows = await repo.poolSeries(r, pools);
  const names = pools ?? [...new Set(rows.map((x) => x.pool))].sort();
  const out: Series[] = [];
  for (const pool of names) {
    const mine = rows.filter((x) => x.pool === pool);
    for (const [field, name, unit] of POOL_FIELDS) {
      out.push(series(r, mine, name, unit, (x) => round(x[field] as number), null, { pool }));
    }
  }
  return out;
}

export function response(r: BucketRange, list: Series[]): TimeseriesResponse {
  return {
    from: new Date(r.fromMs).toISOString(),
    to: new Date(r.toMs).toISOString(),
    step_seconds: r.stepMs / 1000,
    series: list,
  };
}
