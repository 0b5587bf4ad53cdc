// The limits area (docs/limits.md): a workspace's limits, cached for the
// areas that enforce them, and the limits route with what the workspace
// uses now. The limits area sits below the products that hold the usage
// (queues, volumes, /v1), so each reports its own meter here, and each cache
// of limits elsewhere listens for changes, instead of the composition root
// knowing who keeps what.
import type { Area, AreaRoutes } from "../http/index.ts";
import type { WorkspaceRepo } from "../store/index.ts";
import { ComputeBudgets, V1TokenBudget } from "./budgets.ts";
import { WorkspaceLimitsCache } from "./limits.ts";
import { type LimitRouteDeps, limitRoutes } from "./routes.ts";
import type { LimitsRepo } from "./store.ts";

/** What a workspace uses now, by part; a part no area reports reads 0. */
export type UsageMeters = LimitRouteDeps["usage"];

export class Limits {
  readonly cache: WorkspaceLimitsCache;
  readonly usage: UsageMeters = {};
  /** GPU-hours and CPU-hours per month, from the compute seconds an area reports (the usage area). */
  readonly budgets: ComputeBudgets;
  /** /v1 tokens per month, from the tokens an area reports (the usage area); the /v1 gateway checks it. */
  readonly v1Tokens: V1TokenBudget;
  private readonly listeners: ((workspaceId: string) => void)[] = [];

  constructor(repo: LimitsRepo) {
    this.cache = new WorkspaceLimitsCache({ repo });
    this.budgets = new ComputeBudgets({ limits: this.cache, used: () => this.usage.computeSeconds });
    this.v1Tokens = new V1TokenBudget({ limits: this.cache, used: () => this.usage.v1Tokens });
  }

  /** The workspace's limits (cached). */
  get(workspaceId: string) {
    return this.cache.get(workspaceId);
  }

  /** An area's meters of what a workspace uses, shown by the limits route. */
  report(meters: UsageMeters): void {
    Object.assign(this.usage, meters);
  }

  /** Calls `fn` after a workspace's limits changed here (caches of them elsewhere forget them). */
  onChange(fn: (workspaceId: string) => void): void {
    this.listeners.push(fn);
  }

  /** The workspace's limits changed: this cache and every listener forget them. */
  changed(workspaceId: string): void {
    this.cache.invalidate(workspaceId);
    for (const fn of this.listeners) fn(workspaceId);
  }
}

export function limitsHttpRoutes(d: LimitRouteDeps): AreaRoutes {
  return { api: [limitRoutes(d)] };
}

export function createLimits(d: {
  repo: LimitsRepo;
  workspaces: Pick<WorkspaceRepo, "byExternalId">;
}): Area<Limits> {
  const limits = new Limits(d.repo);
  return {
    service: limits,
    routes: limitsHttpRoutes({
      workspaces: d.workspaces,
      limits: d.repo,
      usage: limits.usage,
      thisMonth: (ws) => limits.budgets.thisMonth(ws),
      v1TokensThisMonth: (ws) => limits.v1Tokens.thisMonth(ws),
      onChange: (ws) => limits.changed(ws),
    }),
  };
}
