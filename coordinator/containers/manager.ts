import type { Reservation } from "../scheduler/cluster-view.ts";
// Containers on demand: keeps each stub at the container count its demand and
// deployment ask for (docs/tasks.md step 4, docs/deployments.md
// "Autoscaling"), within the workspace's limits (docs/limits.md: a start
// that would exceed one waits until usage drops); stops containers idle past
// keep_warm_seconds, those of stopped deployments, and those of an older
// config once idle. Runners pull from the stub's shared consumer, so warm
// containers are reused by the next tasks.

import { BerthError } from "../../shared/errors.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import {
  type ContainerLimits,
  type WorkspaceUsage,
  addUsage,
  everFitsLimits,
  fitsLimits,
  usageOf,
} from "../scheduler/quota.ts";
import type { ContainerCounts, StubDemand } from "../tasks/activity.ts";
import { type StopCandidate, type StopReason, containersToStop, desiredContainers } from "./autoscale.ts";
import { CodePusher } from "./code-push.ts";
import { ContainerTable, type Managed } from "./container-table.ts";
import { FleetSync } from "./fleet-sync.ts";
import { placementRequest } from "./runner-request.ts";
import { ScaleTargets } from "./scale-targets.ts";
import { ContainerStarter } from "./starter.ts";
import {
  type ContainerManagerOptions,
  type ManagedContainerInfo,
  type ResolvedContainerManagerOptions,
  type StubRecord,
  resolveContainerManagerOptions,
} from "./types.ts";

const DEMAND_RECONCILE_GAP_MS = 20;

export class ContainerManager implements ContainerCounts {
  private readonly o: ResolvedContainerManagerOptions;
  private readonly containers = new ContainerTable();
  private readonly fleet: FleetSync;
  private readonly starter: ContainerStarter;
  private readonly targets: ScaleTargets;
  private readonly stubCache = new Map<string, { stub: StubRecord | undefined; at: number }>();
  private readonly limitCache = new Map<string, { limits: ContainerLimits; at: number }>();
  private readonly work = new Set<Promise<unknown>>();
  private timer?: NodeJS.Timeout;
  private unsubscribers: (() => void)[] = [];
  private reconciling?: Promise<void>;
  private rerun = false;
  private tickQueued = false;
  private lastReconcileAt = 0;
  private stopped = false;

  constructor(options: ContainerManagerOptions) {
    this.o = resolveContainerManagerOptions(options);
    const code = new CodePusher(this.o.code);
    const track = <T>(p: Promise<T>) => this.track(p);
    this.fleet = new FleetSync({
      fleet: this.o.fleet,
      containers: this.containers,
      code,
      agents: this.o.agents,
      log: this.o.log,
      clock: this.o.clock,
      track,
      onSynced: () => {
        if (!this.stopped) void this.reconcile();
      },
    });
    this.starter = new ContainerStarter({
      o: this.o,
      containers: this.containers,
      code,
      fleet: this.fleet,
      track,
      makeRoomFor: (stub) => this.yieldIdleFor(stub, false),
    });
    this.targets = new ScaleTargets(this.o.log, this.o.onScale);
  }

  start(): void {
    this.stopped = false;
    this.unsubscribers = [
      this.o.activity.onDemandChange(() => this.scheduleReconcile()),
      this.o.events.subscribe((e) => this.onContainerEvent(e)),
    ];
    this.timer = setInterval(() => void this.reconcile(), this.o.reconcileIntervalMs);
    this.scheduleReconcile();
  }

  /** Ends the loop; with stopContainers (default: the option), also stops every container it runs. */
  async stop(opts: { stopContainers?: boolean } = {}): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    for (const u of this.unsubscribers) u();
    this.unsubscribers = [];
    await this.settled();
    if (opts.stopContainers ?? this.o.stopContainersOnStop) {
      await Promise.allSettled(this.containers.all().map((c) => this.stopOne(c)));
    }
    this.containers.clear();
  }

  activeContainers(stubId: string): number {
    return this.containers.live((c) => c.stubId === stubId).length;
  }

  list(): ManagedContainerInfo[] {
    return this.containers.info();
  }

  /** The stub's containers: starting, running and stopping ones (only running ones take requests). */
  containersOf(stubId: string): ManagedContainerInfo[] {
    return this.containers.info((c) => c.stubId === stubId);
  }

  /**
   * Calls `listener` with the stub's id when one of its containers becomes
   * running, starts stopping, or is gone. Synchronous: keep it cheap. Returns
   * an unsubscribe.
   */
  onContainersChange(listener: (stubId: string) => void): () => void {
    return this.containers.onChange(listener);
  }

  /**
   * Forgets the cached stub and reconciles soon. The deployment service calls
   * it whenever a stub or its deployment changes (deploy, a `berth serve`
   * re-sync that raises config_version, stop, start, delete), so the change
   * does not wait out the stub cache (stubCacheMs).
   */
  invalidateStub(stubId: string): void {
    this.stubCache.delete(stubId);
    this.scheduleReconcile();
  }

  /** What this manager's containers hold on each agent (the sandbox service places around them). */
  reservations(): Reservation[] {
    return this.containers.reservations();
  }

  /** What this manager's containers of the workspace hold now (starting and running ones). */
  ownUsage(workspaceId: string): WorkspaceUsage {
    return usageOf(this.containers.live((c) => c.workspaceId === workspaceId).map((c) => c.reservation));
  }

  /** What the workspace holds now, sandboxes and pods included: what its limits count. */
  workspaceUsage(workspaceId: string): WorkspaceUsage {
    return addUsage(this.ownUsage(workspaceId), this.o.otherUsage(workspaceId));
  }

  /** Why the stub's tasks wait for a container now (no room, a workspace limit); undefined when they do not. */
  waitReason(stubId: string): string | undefined {
    return this.starter.waitReason(stubId);
  }

  /**
   * Forgets the workspace's cached limits and reconciles soon: the limits
   * route calls it after an operator changed them, so a raised limit starts
   * waiting containers at once.
   */
  invalidateLimits(workspaceId: string): void {
    this.limitCache.delete(workspaceId);
    this.scheduleReconcile();
  }

  /** Failed start rounds of a stub since its last healthy container. */
  startAttempts(stubId: string): number {
    return this.starter.failures.attempts(stubId);
  }

  /** Resolves when the reconcile in progress and every start, stop and removal it began have ended. */
  async settled(): Promise<void> {
    while (this.reconciling || this.work.size > 0 || this.tickQueued) {
      if (this.tickQueued) await new Promise((r) => setImmediate(r));
      await this.reconciling;
      await Promise.allSettled([...this.work]);
    }
  }

  /** One pass: adopt/forget agents, stop idle containers, start what demand needs. Single-flight. */
  reconcile(): Promise<void> {
    if (this.reconciling) {
      this.rerun = true;
      return this.reconciling;
    }
    this.reconciling = (async () => {
      do {
        this.rerun = false;
        try {
          await this.reconcileOnce();
        } catch (err) {
          this.o.log.error({ err }, "container reconcile failed");
        }
      } while (this.rerun && !this.stopped);
    })().finally(() => {
      this.reconciling = undefined;
    });
    return this.reconciling;
  }

  /**
   * Demand changes with every task event; a burst (a map's tasks finishing)
   * is folded into one reconcile per DEMAND_RECONCILE_GAP_MS.
   */
  private scheduleReconcile(): void {
    if (this.tickQueued || this.stopped) return;
    this.tickQueued = true;
    const wait = Math.max(0, this.lastReconcileAt + DEMAND_RECONCILE_GAP_MS - Date.now());
    const run = () => {
      this.tickQueued = false;
      if (!this.stopped) void this.reconcile();
    };
    if (wait === 0) setImmediate(run);
    else setTimeout(run, wait);
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.work.add(p);
    void p.finally(() => this.work.delete(p)).catch(() => {});
    return p;
  }

  private async reconcileOnce(): Promise<void> {
    if (this.stopped) return;
    this.lastReconcileAt = Date.now();
    const now = this.o.clock();
    this.fleet.sync();
    const demand = new Map<string, StubDemand>(this.o.activity.demand().map((d) => [d.stubId, d]));
    const stubIds = new Set([
      ...demand.keys(),
      ...this.containers.stubIds(),
      // A baseline runs with no demand; a target above zero is followed until it reaches zero.
      ...(this.o.deployments?.baselines().map((b) => b.stubId) ?? []),
      ...this.targets.stubIds(),
    ]);
    for (const stubId of stubIds) {
      if (this.stopped) return;
      try {
        await this.reconcileStub(stubId, demand.get(stubId), now);
      } catch (err) {
        this.o.log.error({ err, stubId }, "container reconcile of a stub failed");
      }
    }
    for (const id of this.stubCache.keys()) {
      if (!stubIds.has(id)) {
        this.stubCache.delete(id);
        this.starter.forget(id);
      }
    }
  }

  private async reconcileStub(stubId: string, d: StubDemand | undefined, now: number): Promise<void> {
    const stub = await this.stub(stubId, now);
    const queueDepth = d?.pending ?? 0;
    if (!stub) {
      // The stub was deleted: nothing will use its containers again.
      const live = this.containers.live((c) => c.stubId === stubId);
      for (const c of live.filter((c) => c.state === "running")) void this.track(this.stopOne(c));
      const workspaceId = this.targets.workspaceOf(stubId) ?? live[0]?.workspaceId ?? d?.workspaceId;
      if (workspaceId) this.targets.note({ id: stubId, workspaceId }, 0, now, "stub deleted", queueDepth);
      return;
    }
    // A deployment's or serve session's stub whose record is gone (deleted) drains like a stopped one.
    const dep =
      this.o.deployments?.of(stub.id) ??
      (this.o.deployments && /\/(deployment|serve)$/.test(stub.type)
        ? { active: false, minContainers: 0 }
        : undefined);
    const draining = dep !== undefined && !dep.active;
    const baseline = dep?.active ? dep.minContainers : 0;
    const demand = { pending: d?.pending ?? 0, running: d?.running ?? 0 };
    const desired = draining ? 0 : desiredContainers(stub, demand, baseline);
    this.noteHealthy(stub, now);
    const stops = this.scaleDown(stub, desired, draining, now);
    // Warm containers above the desired count stay part of the target until they stop.
    const target = draining ? 0 : Math.max(desired, this.current(stub).length);
    this.targets.note(stub, target, now, this.reason(stops, draining, demand, baseline), queueDepth);
    if (!draining) await this.scaleUp(stub, desired, now);
    else this.starter.notWaiting(stub.id);
  }

  /** Why a target changed: read by people, in the log and the deployment's events. */
  private reason(
    stops: StopReason[],
    draining: boolean,
    demand: { pending: number; running: number },
    baseline: number,
  ): string {
    if (draining) return "deployment stopped";
    if (stops.includes("idle past keep_warm_seconds")) return "idle past keep_warm_seconds";
    if (stops.includes("config changed")) return "config changed";
    if (demand.pending + demand.running === 0 && baseline > 0) return "min_containers";
    return `queue depth: ${demand.pending} waiting, ${demand.running} running`;
  }

  /** Cached like stubs: scale-up asks on every reconcile while tasks wait. */
  private async workspaceLimits(workspaceId: string, now: number): Promise<ContainerLimits> {
    const hit = this.limitCache.get(workspaceId);
    if (hit && now - hit.at < this.o.stubCacheMs) return hit.limits;
    const limits = await this.o.workspaceLimits(workspaceId);
    this.limitCache.set(workspaceId, { limits, at: now });
    return limits;
  }

  private async stub(stubId: string, now: number): Promise<StubRecord | undefined> {
    const hit = this.stubCache.get(stubId);
    if (hit && now - hit.at < this.o.stubCacheMs) return hit.stub;
    const stub = await this.o.stubs.get(stubId);
    this.stubCache.set(stubId, { stub, at: now });
    return stub;
  }

  /** Live containers of the stub's current config (an adopted one of unknown version counts as current). */
  private current(stub: StubRecord): Managed[] {
    return this.containers.live((c) => c.stubId === stub.id && !this.outdated(c, stub));
  }

  private outdated(c: Managed, stub: StubRecord): boolean {
    return c.configVersion !== undefined && c.configVersion < stub.configVersion;
  }

  // ---- scale down -------------------------------------------------------------

  /** A container that lived past healthyAfterMs or took a task ends the stub's failure streak. */
  private noteHealthy(stub: StubRecord, now: number): void {
    if (this.startAttempts(stub.id) === 0) return;
    const healthy = this.containers
      .live((c) => c.stubId === stub.id && c.state === "running")
      .some(
        (c) =>
          now - c.since >= this.o.healthyAfterMs || this.o.activity.containerActivity(c.id) !== undefined,
      );
    if (healthy) this.starter.failures.reset(stub.id);
  }

  /** Stops what containersToStop picks; returns why each stopped. */
  private scaleDown(stub: StubRecord, desired: number, draining: boolean, now: number): StopReason[] {
    const running = this.containers.live((c) => c.stubId === stub.id && c.state === "running");
    const candidates: StopCandidate[] = running.map((c) => {
      const a = this.o.activity.containerActivity(c.id);
      return {
        id: c.id,
        busy: a?.busy === true,
        idleSince: Math.max(a?.lastActiveAt ?? 0, c.since),
        outdated: this.outdated(c, stub),
      };
    });
    const stops = containersToStop({
      candidates,
      current: this.current(stub).length,
      keep: desired,
      keepWarmMs: stub.config.keep_warm_seconds * 1000,
      now,
      draining,
    });
    for (const { id, reason } of stops) {
      const i = running.findIndex((c) => c.id === id);
      const c = running[i] as Managed;
      this.o.log.info(
        {
          containerId: id,
          stubId: stub.id,
          agentId: c.agentId,
          idleMs: now - (candidates[i]?.idleSince ?? now),
          reason,
        },
        `stopping a container: ${reason}`,
      );
      void this.track(this.stopOne(c));
    }
    return stops.map((s) => s.reason);
  }

  private async stopOne(c: Managed): Promise<void> {
    this.containers.setState(c, "stopping");
    c.stopRequested = true;
    try {
      await this.fleet.api(c.agentId).stopContainer(c.id, { graceMs: this.o.stopGraceMs, remove: true });
    } catch (err) {
      if (!(err instanceof BerthError && err.code === "not_found")) {
        this.o.log.warn(
          { err, containerId: c.id, agentId: c.agentId },
          "cannot stop a container; will retry",
        );
        if (this.containers.holds(c)) this.containers.setState(c, "running");
        return;
      }
    }
    this.containers.remove(c);
  }

  /**
   * A warm container keeps its room while idle; when tasks of another stub
   * cannot be placed (no room in the fleet, or sameWorkspace: the workspace
   * is at a limit), the longest-idle container of a stub with no tasks at
   * all, above its deployment's baseline, gives its room up (one per failed
   * placement: the next pass places, or takes another).
   */
  private yieldIdleFor(stub: StubRecord, sameWorkspace: boolean): void {
    const { activity } = this.o;
    const aboveBaseline = (stubId: string) => {
      const dep = this.o.deployments?.of(stubId);
      const baseline = dep?.active ? dep.minContainers : 0;
      return this.containers.live((c) => c.stubId === stubId).length > baseline;
    };
    const victim = this.containers
      .live(
        (c) =>
          c.stubId !== stub.id && c.state === "running" && (!sameWorkspace || c.workspaceId === stub.workspaceId),
      )
      .filter((c) => {
        const d = activity.demandOf(c.stubId);
        return !activity.containerActivity(c.id)?.busy && !d?.pending && !d?.running;
      })
      .filter((c) => aboveBaseline(c.stubId))
      .map((c) => ({
        c,
        idleSince: Math.max(activity.containerActivity(c.id)?.lastActiveAt ?? 0, c.since),
      }))
      .sort((a, b) => a.idleSince - b.idleSince)[0];
    if (!victim) return;
    this.o.log.info(
      { containerId: victim.c.id, stubId: victim.c.stubId, forStubId: stub.id, agentId: victim.c.agentId },
      "stopping an idle warm container to make room for waiting tasks",
    );
    void this.track(this.stopOne(victim.c));
  }

  // ---- events -----------------------------------------------------------------

  private onContainerEvent(e: ContainerEventMessage): void {
    if (e.type !== "exit" || e.labels?.[RunnerLabels.managed] !== "1") return;
    const c = this.containers.get(e.containerId);
    if (c && c.agentId !== e.agentId) return;
    if (c) {
      this.containers.remove(c);
      const now = this.o.clock();
      if (!c.stopRequested) {
        const lived = now - c.since;
        this.o.log.info(
          { containerId: c.id, stubId: c.stubId, exitCode: e.exitCode, reason: e.reason },
          "a runner container exited",
        );
        if (lived < this.o.healthyAfterMs && this.o.activity.containerActivity(c.id) === undefined) {
          const why = `runner container ${c.id} ended (${e.reason ?? "exited"}, code ${e.exitCode ?? "?"}) ${Math.round(lived / 1000)} s after it started, before taking a task; see its logs`;
          void this.track(
            this.starter.noteFailure(c.stubId, now, { deterministic: false, code: "internal", message: why }),
          );
        }
      }
      if (c.stopRequested) return;
    }
    if (!this.stopped) void this.track(this.fleet.removeOnAgent(e.agentId, e.containerId));
    this.scheduleReconcile();
  }

  // ---- scale up ---------------------------------------------------------------

  /**
   * Starts containers up to `desired` (outdated ones do not count), each
   * only while the workspace stays within its limits; past one, the stub
   * waits with that limit as its reason (and an idle warm container of
   * another of the workspace's stubs may give its room up).
   */
  private async scaleUp(stub: StubRecord, desired: number, now: number): Promise<void> {
    if (this.starter.failures.blocked(stub.id, now)) return;
    const missing = desired - this.current(stub).length;
    if (missing <= 0) return this.starter.notWaiting(stub.id);
    const limits = await this.workspaceLimits(stub.workspaceId, now);
    const req = placementRequest(stub, []);
    for (let i = 0; i < missing; i++) {
      const check = fitsLimits(limits, this.workspaceUsage(stub.workspaceId), req);
      if (!check.ok) {
        if (!everFitsLimits(limits, req))
          return this.starter.waiting(stub.id, `${check.reason}; it cannot start until an operator raises the limit`);
        this.starter.waiting(stub.id, check.reason);
        return this.yieldIdleFor(stub, true);
      }
      if (!this.starter.placeOne(stub)) return;
    }
  }
}
