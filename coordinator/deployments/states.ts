// What the container manager and the schedule ticker read about deployments,
// answered synchronously from memory: the service keeps every deployment (with
// its stub's extra) here, changes it on each of its own writes and reloads it
// from the store every few seconds for changes other coordinators made.

import type { DeploymentRecord, DeploymentWithStub } from "./store.ts";

export interface DeploymentStates {
  /** undefined: the stub belongs to no deployment (a function's stub): it runs on demand. */
  of(stubId: string): { active: boolean; minContainers: number } | undefined;
  /** Active deployments' stubs whose baseline is > 0 (reconciled even without demand). */
  baselines(): { stubId: string; minContainers: number }[];
}

/** A serve session is its own group: it never replaces the deployed versions of its name. */
const groupOf = (d: DeploymentRecord) => `${d.workspaceId}\u0000${d.name}\u0000${d.serve ? "serve" : ""}`;

/** The latest active version of each (workspace, name), and each active serve session. */
export function latestActiveVersions<T extends DeploymentRecord>(all: Iterable<T>): T[] {
  const top = new Map<string, T>();
  for (const d of all) {
    if (!d.active) continue;
    const g = groupOf(d);
    const cur = top.get(g);
    if (!cur || d.version > cur.version) top.set(g, d);
  }
  return [...top.values()];
}

export class DeploymentCache implements DeploymentStates {
  private readonly byId = new Map<string, DeploymentWithStub>();
  private states = new Map<string, { active: boolean; minContainers: number }>();
  private latest: DeploymentWithStub[] = [];
  private baselineList: { stubId: string; minContainers: number }[] = [];
  /** Deployments held at one container at least while a stack waits for them to be ready (docs/stacks.md). */
  private readonly held = new Set<string>();
  /** Raised on every local change, so that a reload begun before it is not applied over it. */
  private changes = 0;

  get generation(): number {
    return this.changes;
  }

  of(stubId: string): { active: boolean; minContainers: number } | undefined {
    return this.states.get(stubId);
  }

  baselines(): { stubId: string; minContainers: number }[] {
    return this.baselineList.map((b) => ({ ...b }));
  }

  get(id: string): DeploymentWithStub | undefined {
    return this.byId.get(id);
  }

  all(): IterableIterator<DeploymentWithStub> {
    return this.byId.values();
  }

  byStub(stubId: string): DeploymentWithStub | undefined {
    for (const d of this.byId.values()) if (d.stubId === stubId) return d;
    return undefined;
  }

  /** The latest active version of each name (and each active serve session). */
  latestActive(): readonly DeploymentWithStub[] {
    return this.latest;
  }

  put(d: DeploymentWithStub): void {
    this.changes++;
    this.byId.set(d.id, d);
    this.derive();
  }

  /** Holds (or releases) one container of the deployment while it is its name's latest active version. */
  hold(id: string, on: boolean): void {
    this.changes++;
    if (on) this.held.add(id);
    else this.held.delete(id);
    this.derive();
  }

  remove(id: string): void {
    this.changes++;
    this.byId.delete(id);
    this.derive();
  }

  /** Replaces everything with a fresh read, unless a local change came after `generation`. */
  replaceAll(all: DeploymentWithStub[], generation: number): boolean {
    if (generation !== this.changes) return false;
    this.byId.clear();
    for (const d of all) this.byId.set(d.id, d);
    this.derive();
    return true;
  }

  private derive(): void {
    const latest = latestActiveVersions(this.byId.values());
    const latestIds = new Set(latest.map((d) => d.id));
    const states = new Map<string, { active: boolean; minContainers: number }>();
    const baselines: { stubId: string; minContainers: number }[] = [];
    for (const d of this.byId.values()) {
      // A pod keeps one container at least (keep_warm_seconds -1: never scaled to zero).
      const floor = d.kind === "pod" || this.held.has(d.id) ? 1 : 0;
      const minContainers = latestIds.has(d.id) ? Math.max(floor, d.extra.min_containers ?? 0) : 0;
      states.set(d.stubId, { active: d.active, minContainers });
      if (minContainers > 0) baselines.push({ stubId: d.stubId, minContainers });
    }
    this.states = states;
    this.latest = latest;
    this.baselineList = baselines;
  }
}
