// A workspace's usage report (docs/usage.md): what its tasks and sandbox/pod
// containers asked for, times how long they ran, and its /v1 tokens, in a
// window, by day, deployment and member as asked; plus the bytes it stores now.

import { BerthError } from "../../shared/errors.ts";
import { requestedResources } from "../tasks/index.ts";
import type { RunRecord, StubSizing, UsageRepo } from "./store.ts";
import type { UsageDimension, UsageReport } from "../../shared/usage.ts";
import { type RunSize, UsageTally } from "./tally.ts";

export interface UsageQuery {
  /** ms since epoch: the window is [fromMs, toMs). */
  fromMs: number;
  toMs: number;
  by: readonly UsageDimension[];
}

export type { StorageNow, UsageReport } from "../../shared/usage.ts";

/** The longest window one report covers. */
export const MAX_WINDOW_DAYS = 366;

export interface UsageServiceDeps {
  repo: UsageRepo;
  /** Bytes in the workspace's volumes now (VolumeFiles.workspaceBytes). @default 0 */
  volumeBytes?(workspaceId: string): Promise<number>;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

/** The GPU type a run is counted under: the first type it asked for that its agent has, else the first it asked for. */
export function gpuTypeOf(asked: string[], agentTypes: string[] | undefined): string {
  if (asked.length === 0) return "any";
  const have = new Set((agentTypes ?? []).map((t) => t.toLowerCase()));
  return asked.find((t) => have.has(t.toLowerCase())) ?? (asked[0] as string);
}

export class UsageService {
  private readonly clock: () => number;

  constructor(private readonly d: UsageServiceDeps) {
    this.clock = d.clock ?? Date.now;
  }

  now(): number {
    return this.clock();
  }

  /**
   * Requested GPU and CPU seconds of the workspace's runs in [fromMs, toMs),
   * as the report counts them (workspace budgets, docs/limits.md).
   */
  async computeSeconds(
    workspaceId: string,
    fromMs: number,
    toMs: number,
  ): Promise<{ gpuSeconds: number; cpuSeconds: number }> {
    if (!(fromMs < toMs)) return { gpuSeconds: 0, cpuSeconds: 0 };
    const { totals } = await this.report(workspaceId, { fromMs, toMs, by: [] });
    return { gpuSeconds: totals.gpu_seconds, cpuSeconds: totals.cpu_seconds };
  }

  /**
   * Prompt plus completion tokens of the workspace's /v1 requests in
   * [fromMs, toMs), as the report's totals count them (the workspace's
   * v1_tokens_per_month budget, docs/limits.md).
   */
  async v1Tokens(workspaceId: string, fromMs: number, toMs: number): Promise<number> {
    if (!(fromMs < toMs)) return 0;
    let total = 0;
    for (const r of await this.d.repo.inference(workspaceId, fromMs, toMs)) total += r.totalTokens;
    return total;
  }

  async report(workspaceId: string, q: UsageQuery): Promise<UsageReport> {
    if (!(q.fromMs < q.toMs)) throw new BerthError("invalid_request", "from must be before to");
    if (q.toMs - q.fromMs > MAX_WINDOW_DAYS * 86_400_000)
      throw new BerthError("invalid_request", `a usage window is at most ${MAX_WINDOW_DAYS} days`);
    const from = new Date(q.fromMs).toISOString();
    const to = new Date(q.toMs).toISOString();
    const [deployments, tokenNames] = await Promise.all([
      this.d.repo.deployments(workspaceId),
      this.d.repo.tokenNames(workspaceId),
    ]);
    const byStub = new Map<string, string>();
    const byId = new Map<string, string>();
    for (const dep of deployments) {
      if (dep.stubId) byStub.set(dep.stubId, dep.name);
      byId.set(dep.id, dep.name);
    }
    const tally = new UsageTally(
      q.by,
      { fromMs: q.fromMs, toMs: q.toMs, nowMs: this.clock() },
      {
        deploymentOfStub: (stubId) => byStub.get(stubId) ?? null,
        member: (id) => (id === null ? null : { id, name: tokenNames.get(id) ?? "" }),
      },
    );
    const add = async (runs: RunRecord[]) => {
      const stubs = await this.d.repo.stubs([...new Set(runs.map((r) => r.stubId))]);
      const agents = await this.d.repo.agentGpuTypes([
        ...new Set(runs.map((r) => r.agentId).filter((a): a is string => a !== null)),
      ]);
      for (const run of runs) {
        const stub = stubs.get(run.stubId);
        tally.addRun(run, stub ? sizeOf(stub, run.agentId ? agents.get(run.agentId) : undefined) : NO_SIZE);
      }
    };
    for await (const page of this.d.repo.taskRuns(workspaceId, from, to)) await add(page);
    await add(await this.d.repo.sandboxRuns(workspaceId, from, to));
    for (const r of await this.d.repo.inference(workspaceId, q.fromMs, q.toMs))
      tally.addInference(r, r.deploymentId ? (byId.get(r.deploymentId) ?? null) : null);
    const stored = await this.d.repo.storedBytes(workspaceId);
    const { rows, totals } = tally.result();
    return {
      from,
      to,
      by: [...q.by],
      totals,
      rows,
      storage: {
        at: new Date(this.clock()).toISOString(),
        volume_bytes: (await this.d.volumeBytes?.(workspaceId)) ?? 0,
        object_bytes: stored.objects,
        snapshot_bytes: stored.snapshots,
      },
    };
  }
}

/** A run whose stub is gone: its time counts, its resources cannot. */
const NO_SIZE: RunSize = { cpuMillicores: 0, memoryMib: 0, gpuCount: 0, gpuType: "" };

function sizeOf(stub: StubSizing, agentTypes: string[] | undefined): RunSize {
  const r = requestedResources(stub);
  return {
    cpuMillicores: Math.round(r.cpuCores * 1000),
    memoryMib: stub.config.runtime.memory,
    gpuCount: r.gpuCount,
    gpuType: r.gpuCount > 0 ? gpuTypeOf(r.gpuTypes, agentTypes) : "",
  };
}
