// Compute budgets per calendar month (docs/limits.md): GPU-hours and
// CPU-hours a workspace may use in the current UTC month, from the usage
// tally (requested GPUs or cores × run time). A submission past a budget is
// refused; what runs is never stopped. The month's use is cached briefly so
// submissions do not tally the month on every call. The /v1 token budget
// (V1TokenBudget) counts the month's /v1 tokens the same way.

import { BerthError } from "../../shared/errors.ts";
import type { WorkspaceLimits } from "./store.ts";

/** How long a workspace's month of use is cached. */
export const BUDGET_USE_CACHE_MS = 5000;

/** What a workspace used in a window: requested GPUs or cores × seconds run. */
export interface ComputeSeconds {
  gpuSeconds: number;
  cpuSeconds: number;
}

export interface ComputeBudgetsOptions {
  limits: { get(workspaceId: string): Promise<WorkspaceLimits> };
  /** The workspace's use in [fromMs, toMs) (the usage area's tally); undefined while no area reports it. */
  used: () => ((workspaceId: string, fromMs: number, toMs: number) => Promise<ComputeSeconds>) | undefined;
  /** @default BUDGET_USE_CACHE_MS */
  ttlMs?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

/** The current UTC calendar month: its first instant and the next month's. */
export function monthOf(nowMs: number): { fromMs: number; resetMs: number } {
  const d = new Date(nowMs);
  return {
    fromMs: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1),
    resetMs: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1),
  };
}

const hours = (seconds: number) => Math.round((seconds / 3600) * 100) / 100;

/** One tally of a workspace's month, and what its owner added since. */
interface TallyEntry<T> {
  at: number;
  month: number;
  use: Promise<T>;
  /** Use its owner recorded after the tally was taken (V1TokenBudget.spent). */
  since: number;
}

/**
 * A workspace's use in the current UTC month, tallied by `used` and cached
 * for ttlMs: concurrent reads share one tally, a failed tally is forgotten,
 * and a new month starts a new one.
 */
class MonthlyTally<T> {
  private readonly cache = new Map<string, TallyEntry<T>>();

  constructor(
    private readonly used: () =>
      | ((workspaceId: string, fromMs: number, toMs: number) => Promise<T>)
      | undefined,
    private readonly ttlMs: number,
    readonly clock: () => number,
  ) {}

  /** The month's tally (cached or taken now); undefined when nothing reports use. */
  read(workspaceId: string): TallyEntry<T> | undefined {
    const used = this.used();
    if (!used) return undefined;
    const now = this.clock();
    const { fromMs } = monthOf(now);
    const hit = this.cache.get(workspaceId);
    if (hit && hit.month === fromMs && now - hit.at < this.ttlMs) return hit;
    const entry: TallyEntry<T> = { at: now, month: fromMs, use: used(workspaceId, fromMs, now), since: 0 };
    this.cache.set(workspaceId, entry);
    entry.use.catch(() => {
      if (this.cache.get(workspaceId) === entry) this.cache.delete(workspaceId);
    });
    return entry;
  }

  /** This month's cached tally, without taking one. */
  cached(workspaceId: string): TallyEntry<T> | undefined {
    const hit = this.cache.get(workspaceId);
    return hit && hit.month === monthOf(this.clock()).fromMs ? hit : undefined;
  }

  invalidate(workspaceId: string): void {
    this.cache.delete(workspaceId);
  }
}

export class ComputeBudgets {
  private readonly tally: MonthlyTally<ComputeSeconds>;

  constructor(private readonly o: ComputeBudgetsOptions) {
    this.tally = new MonthlyTally(o.used, o.ttlMs ?? BUDGET_USE_CACHE_MS, o.clock ?? Date.now);
  }

  /** The workspace's use this month (cached; concurrent reads share one tally); undefined when nothing reports use. */
  async thisMonth(workspaceId: string): Promise<ComputeSeconds | undefined> {
    return this.tally.read(workspaceId)?.use;
  }

  /**
   * Refuses new work of the workspace once this month's use reached a budget
   * it would draw on: GPU-hours for work that asks for GPUs, CPU-hours for
   * any work. limit_exceeded names the budget, its use and its reset time.
   */
  async check(workspaceId: string, work: { gpus: boolean }): Promise<void> {
    const l = await this.o.limits.get(workspaceId);
    const gpuBudget = work.gpus ? l.gpuHoursPerMonth : null;
    const cpuBudget = l.cpuHoursPerMonth;
    if (gpuBudget === null && cpuBudget === null) return;
    const use = await this.thisMonth(workspaceId);
    if (!use) return;
    const reset = new Date(monthOf(this.tally.clock()).resetMs).toISOString();
    const refuse = (limit: string, budget: number, seconds: number, what: string) => {
      throw new BerthError(
        "limit_exceeded",
        `the workspace used ${hours(seconds)} of its ${budget} ${what}-hours this month (limit ${limit}): work that uses ${what}s is refused until ${reset}`,
        { limit, [limit]: budget, used_hours: hours(seconds), resets_at: reset },
      );
    };
    if (gpuBudget !== null && use.gpuSeconds >= gpuBudget * 3600)
      refuse("gpu_hours_per_month", gpuBudget, use.gpuSeconds, "GPU");
    if (cpuBudget !== null && use.cpuSeconds >= cpuBudget * 3600)
      refuse("cpu_hours_per_month", cpuBudget, use.cpuSeconds, "CPU");
  }

  /** Forgets cached use (tests, or after the limits changed). */
  invalidate(workspaceId: string): void {
    this.tally.invalidate(workspaceId);
  }
}

export interface V1TokenBudgetOptions {
  limits: { get(workspaceId: string): Promise<WorkspaceLimits> };
  /** The workspace's /v1 tokens in [fromMs, toMs) (the usage area's count); undefined while no area reports it. */
  used: () => ((workspaceId: string, fromMs: number, toMs: number) => Promise<number>) | undefined;
  /** @default BUDGET_USE_CACHE_MS */
  ttlMs?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

/**
 * The /v1 token budget per calendar month (v1_tokens_per_month): prompt plus
 * completion tokens of the workspace's /v1 requests in the current UTC month,
 * counted as the usage report counts them, over the same month as the
 * compute budgets. The month's count is cached like theirs; the tokens of
 * requests this coordinator finished since are added to it as they end, so a
 * request past the budget is refused without waiting for the cache to expire.
 */
export class V1TokenBudget {
  private readonly tally: MonthlyTally<number>;

  constructor(private readonly o: V1TokenBudgetOptions) {
    this.tally = new MonthlyTally(o.used, o.ttlMs ?? BUDGET_USE_CACHE_MS, o.clock ?? Date.now);
  }

  /** The workspace's /v1 tokens this month; undefined when nothing reports them. */
  async thisMonth(workspaceId: string): Promise<number | undefined> {
    const entry = this.tally.read(workspaceId);
    return entry && (await entry.use) + entry.since;
  }

  /** Tokens a /v1 request of the workspace used, as it ended (counted until the next tally). */
  spent(workspaceId: string, tokens: number): void {
    const entry = this.tally.cached(workspaceId);
    if (entry && tokens > 0) entry.since += tokens;
  }

  /**
   * Refuses a /v1 request of the workspace once this month's tokens reached
   * its budget; limit_exceeded names the budget, its use and its reset time.
   * A request admitted before is never stopped.
   */
  async check(workspaceId: string): Promise<void> {
    const budget = (await this.o.limits.get(workspaceId)).v1TokensPerMonth;
    if (budget === null) return;
    const used = await this.thisMonth(workspaceId);
    if (used === undefined || used < budget) return;
    const reset = new Date(monthOf(this.tally.clock()).resetMs).toISOString();
    throw new BerthError(
      "limit_exceeded",
      `the workspace used ${used} of its ${budget} /v1 tokens this month (limit v1_tokens_per_month): /v1 requests are refused until ${reset}`,
      { limit: "v1_tokens_per_month", v1_tokens_per_month: budget, used_tokens: used, resets_at: reset },
    );
  }

  /** Forgets the cached count (tests, or after the limits changed). */
  invalidate(workspaceId: string): void {
    this.tally.invalidate(workspaceId);
  }
}
