// Adds runs and /v1 requests up into usage rows (docs/usage.md). Pure: the
// records come from store.ts. Run time is cut at the window's ends and at
// each UTC midnight, so a task that runs across midnight counts on both days.
// Sums are kept in integer milliseconds (times millicores, MiB or GPUs) and
// turned into seconds only at the end: totals match the records exactly.

import type { UsageDimension, UsageFigures, UsageKey, UsageRow } from "../../shared/usage.ts";
import type { InferenceRecord, RunRecord } from "./store.ts";

export type { UsageDimension, UsageFigures, UsageKey, UsageRow } from "../../shared/usage.ts";
export { USAGE_DIMENSIONS } from "../../shared/usage.ts";

/** What one run's container asked for. */
export interface RunSize {
  cpuMillicores: number;
  memoryMib: number;
  gpuCount: number;
  /** The GPU type the run is counted under; "" without GPUs. */
  gpuType: string;
}

/** Exact sums: milliseconds times the unit of each resource. */
interface Sums {
  tasks: number;
  sandboxes: number;
  runMs: number;
  cpuMilliMs: number;
  memoryMibMs: number;
  gpuMs: number;
  gpuMsByType: Map<string, number>;
  requests: number;
  prompt: number;
  completion: number;
  total: number;
}

const emptySums = (): Sums => ({
  tasks: 0,
  sandboxes: 0,
  runMs: 0,
  cpuMilliMs: 0,
  memoryMibMs: 0,
  gpuMs: 0,
  gpuMsByType: new Map(),
  requests: 0,
  prompt: 0,
  completion: 0,
  total: 0,
});

const DAY_MS = 86_400_000;
const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);
const round3 = (n: number) => Math.round(n * 1000) / 1000;

/** The slices of [start, end) cut at each UTC midnight. */
export function splitByDay(start: number, end: number): { day: string; ms: number }[] {
  const out: { day: string; ms: number }[] = [];
  let at = start;
  while (at < end) {
    const midnight = (Math.floor(at / DAY_MS) + 1) * DAY_MS;
    const stop = Math.min(end, midnight);
    out.push({ day: dayOf(at), ms: stop - at });
    at = stop;
  }
  return out;
}

export class UsageTally {
  private readonly rows = new Map<string, { key: UsageKey; sums: Sums }>();
  private readonly whole = emptySums();

  constructor(
    private readonly by: readonly UsageDimension[],
    private readonly window: { fromMs: number; toMs: number; nowMs: number },
    private readonly names: {
      /** The deployment a stub serves; null for none. */
      deploymentOfStub(stubId: string): string | null;
      member(tokenId: string | null): UsageKey["member"];
    },
  ) {}

  private sumsFor(day: string, deployment: string | null, tokenId: string | null): Sums[] {
    const key: UsageKey = {};
    if (this.by.includes("day")) key.day = day;
    if (this.by.includes("deployment")) key.deployment = deployment;
    if (this.by.includes("member")) key.member = this.names.member(tokenId);
    const id = JSON.stringify([key.day, key.deployment, key.member?.id ?? key.member]);
    let row = this.rows.get(id);
    if (!row) {
      row = { key, sums: emptySums() };
      this.rows.set(id, row);
    }
    return [row.sums, this.whole];
  }

  addRun(run: RunRecord, size: RunSize): void {
    const started = Date.parse(run.startedAt);
    const ended = run.endedAt === null ? this.window.nowMs : Date.parse(run.endedAt);
    const start = Math.max(started, this.window.fromMs);
    const end = Math.min(ended, this.window.toMs, this.window.nowMs);
    const deployment = this.names.deploymentOfStub(run.stubId);
    if (started >= this.window.fromMs && started < this.window.toMs) {
      for (const s of this.sumsFor(dayOf(started), deployment, run.tokenId)) {
        if (run.kind === "task") s.tasks++;
        else s.sandboxes++;
      }
    }
    for (const { day, ms } of splitByDay(start, end)) {
      for (const s of this.sumsFor(day, deployment, run.tokenId)) {
        s.runMs += ms;
        s.cpuMilliMs += ms * size.cpuMillicores;
        s.memoryMibMs += ms * size.memoryMib;
        if (size.gpuCount > 0) {
          s.gpuMs += ms * size.gpuCount;
          s.gpuMsByType.set(size.gpuType, (s.gpuMsByType.get(size.gpuType) ?? 0) + ms * size.gpuCount);
        }
      }
    }
  }

  addInference(r: InferenceRecord, deploymentName: string | null): void {
    for (const s of this.sumsFor(dayOf(r.dayMs), deploymentName, r.tokenId)) {
      s.requests += r.requests;
      s.prompt += r.promptTokens;
      s.completion += r.completionTokens;
      s.total += r.totalTokens;
    }
  }

  /** The rows, ordered by their keys, and the totals of the window. */
  result(): { rows: UsageRow[]; totals: UsageFigures } {
    const rows = [...this.rows.values()].map(({ key, sums }) => ({ ...key, usage: figures(sums) }));
    const text = (r: UsageKey) =>
      [r.day ?? "", r.deployment ?? "", r.member?.name ?? "", r.member?.id ?? ""].join("\u0000");
    rows.sort((a, b) => (text(a) < text(b) ? -1 : text(a) > text(b) ? 1 : 0));
    return { rows, totals: figures(this.whole) };
  }
}

function figures(s: Sums): UsageFigures {
  const byType: Record<string, number> = {};
  for (const t of [...s.gpuMsByType.keys()].sort()) byType[t] = round3((s.gpuMsByType.get(t) ?? 0) / 1000);
  return {
    tasks: s.tasks,
    sandboxes: s.sandboxes,
    run_seconds: round3(s.runMs / 1000),
    cpu_seconds: round3(s.cpuMilliMs / 1e6),
    memory_gib_seconds: round3(s.memoryMibMs / 1024 / 1000),
    gpu_seconds: round3(s.gpuMs / 1000),
    gpu_seconds_by_type: byType,
    inference_requests: s.requests,
    prompt_tokens: s.prompt,
    completion_tokens: s.completion,
    total_tokens: s.total,
  };
}
