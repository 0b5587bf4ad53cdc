// Containers on demand: keeps each stub at the container count its demand and
// deployment ask for (docs/tasks.md step 4, docs/deployments.md
// "Autoscaling"), within the workspace's limits (docs/limits.md: a start
// that would exceed one waits until usage drops); stops containers idle past
// keep_warm_seconds, those of stopped deployments, and those of an older
// config once idle. Runners pull from the stub's shared consumer, so warm
// containers are reused by the next tasks. Placement and reservations are the
// one planner's (coordinator/scheduler/planner.ts); the manager is the owner
// of runner containers there: it offers its idle warm ones and stops those
// the planner picks to make room, for runners and sandboxes alike (room.ts).

import type { Reservation } from "../scheduler/index.ts";
import type { ContainerOwner } from "../scheduler/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { memoryKillMessage } from "../../shared/memory-kill.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import type { WorkspaceUsage } from "../scheduler/index.ts";
import type { ContainerCounts, StubDemand, StubWait } from "../tasks/index.ts";
import { type StopCandidate, type StopReason, containersToStop, desiredContainers } from "./autoscale.ts";
import { CodePusher } from "./code-push.ts";
import { ContainerTable, type Managed } from "./container-table.ts";
import { FleetSync } from "./fleet-sync.ts";
import { countUnits, gangEndMessage, unitOf } from "./gangs.ts";
import { RoomOffers } from "./room.ts";
import { ScaleTargets, scaleReason } from "./scale-targets.ts";
import { ContainerStarter } from "./starter.ts";
import {
  type ContainerManagerOptions,
  type ManagedContainerInfo,
  type ResolvedContainerManagerOptions,
  type StubRecord,
  resolveContainerManagerOptions,
  type WorkspaceContainerLimits,
} from "./types.ts";
import { stubWaitState } from "./wait-state.ts";
import { TimedCache } from "./timed-cache.ts";

const DEMAND_RECONCILE_GAP_MS = 20;

export class ContainerManager implements ContainerCounts {
  private readonly o: ResolvedContainerManagerOptions;
  private readonly containers: ContainerTable;
  private readonly owner: ContainerOwner;
  private readonly fleet: FleetSync;
  private readonly starter: ContainerStarter;
  private readonly targets: ScaleTargets;
  private readonly stubCache: TimedCache<string, StubRecord | undefined>;
  private readonly limitCache: TimedCache<string, WorkspaceContainerLimits>;
  private readonly work = new Set<Promise<unknown>>();
  /**
   * Stubs whose last runner was killed for memory before its first task: a model server loading
   * its weights dies at the same point however long that takes, so age does not end the streak.
   */
  private readonly killedForMemory = new Set<string>();
  private timer?: NodeJS.Timeout;
  private unsubscribers: (() => void)[] = [];
  private reconciling?: Promise<void>;
  private rerun = false;
  private tickQueued = false;
  private lastReconcileAt = 0;
  private stopped = false;

  constructor(options: ContainerManagerOptions) {
    this.o = resolveContainerManagerOptions(options);
    this.stubCache = new TimedCache(this.o.stubCacheMs);
    this.limitCache = new TimedCache(this.o.stubCacheMs);
    this.containers = new ContainerTable(this.o.planner);
    const room = new RoomOffers({
      o: this.o,
      containers: this.containers,
      stubOf: (stubId) => this.stubCache.peek(stubId),
      stop: (c) => void this.track(this.stopOne(c)),
    });
    this.owner = {
      idle: () => room.idle(),
      stop: (ids, reason) => room.stopToMakeRoom(ids, reason),
      synced: (agentId) => this.fleet.isSynced(agentId),
      preemptible: () => room.preemptible(),
      preempt: (ids, reason) => room.preempt(ids, reason),
    };
    this.o.planner.addOwner(this.owner);
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
      // As if its exit event had come: forgotten, removed there, its stub reconciled.
      onGone: (g) =>
        this.onContainerEvent({
          type: "exit",
          at: this.o.clock(),
          labels: { [RunnerLabels.managed]: "1" },
          ...g,
        }),
    });
    this.starter = new ContainerStarter({
      o: this.o,
      containers: this.containers,
      code,
      fleet: this.fleet,
      track,
      endGang: (gangId, why) => this.endGang(gangId, why),
    });
    this.targets = new ScaleTargets(this.o.log, this.o.onScale);
  }

  start(): void {
    this.stopped = false;
    this.o.planner.addOwner(this.owner);
    this.unsubscribers = [
      // Room released anywhere (a sandbox ended, a container stopped) may start what waits.
      this.o.planner.onRelease(() => this.scheduleReconcile()),
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
    this.o.planner.removeOwner(this.owner);
  }

  /** The stub's containers not being stopped; a gang (extra.nodes > 1) counts once: one task at a time. */
  activeContainers(stubId: string): number {
    return countUnits(this.containers.live((c) => c.stubId === stubId));
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

  /** What the workspace holds now, sandboxes and pods included: what its limits count (the planner's usage). */
  workspaceUsage(workspaceId: string): WorkspaceUsage {
    return this.o.planner.usage(workspaceId);
  }

  /** Why the stub's tasks wait for a container now (no room, a workspace limit); undefined when they do not. */
  waitReason(stubId: string): string | undefined {
    return this.starter.waitReason(stubId);
  }

  /**
   * Why the stub's tasks have no container for them now, from this
   * manager's latest outcome (not a guess); see wait-state.ts.
   */
  waitState(stubId: string): StubWait | undefined {
    return stubWaitState(this.starter, this.containers, stubId, this.o.clock());
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

  /** Why the stub's last container start failed (a pod's entrypoint not found or exiting), until one is healthy. */
  startError(stubId: string): string | undefined {
    return this.starter.failures.lastError(stubId);
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
    // Higher priority first: its containers take the room before lower ones are placed.
    // The stubs are loaded (or cached) first so that their priorities are known.
    await Promise.all([...stubIds].map((id) => this.stub(id, now).catch(() => undefined)));
    const priority = (id: string) => this.stubCache.peek(id)?.extra.priority ?? 0;
    for (const stubId of [...stubIds].sort((a, b) => priority(b) - priority(a))) {
      if (this.stopped) return;
      try {
        await this.reconcileStub(stubId, demand.get(stubId), now);
      } catch (err) {
        this.o.log.error({ err, stubId }, "container reconcile of a stub failed");
      }
    }
    for (const id of [...this.stubCache.keys()]) {
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
    const target = draining ? 0 : Math.max(desired, this.currentUnits(stub));
    this.targets.note(stub, target, now, scaleReason(stops, draining, demand, baseline), queueDepth);
    if (!draining) await this.scaleUp(stub, desired, now);
    else this.starter.notWaiting(stub.id);
  }

  /** Why a target changed: read by people, in the log and the deployment's events. */
  /** Cached like stubs: scale-up asks on every reconcile while tasks wait. */
  private workspaceLimits(workspaceId: string, now: number): Promise<WorkspaceContainerLimits> {
    return this.limitCache.get(workspaceId, now, () => this.o.workspaceLimits(workspaceId));
  }

  private stub(stubId: string, now: number): Promise<StubRecord | undefined> {
    return this.stubCache.get(stubId, now, () => this.o.stubs.get(stubId));
  }

  /** Live containers of the stub's current config (an adopted one of unknown version counts as current). */
  private current(stub: StubRecord): Managed[] {
    return this.containers.live((c) => c.stubId === stub.id && !this.outdated(c, stub));
  }

  /** current() in units: a gang counts once (gangs.ts). */
  private currentUnits(stub: StubRecord): number {
    return countUnits(this.current(stub));
  }

  private outdated(c: Managed, stub: StubRecord): boolean {
    return c.configVersion !== undefined && c.configVersion < stub.configVersion;
  }

  // ---- scale down -------------------------------------------------------------

  /** A container that lived past healthyAfterMs or took a task ends the stub's failure streak. */
  private noteHealthy(stub: StubRecord, now: number): void {
    if (this.startAttempts(stub.id) === 0) return;
    const byAge = !this.killedForMemory.has(stub.id);
    const healthy = this.containers
      .live((c) => c.stubId === stub.id && c.state === "running")
      .some(
        (c) =>
          (byAge && now - c.since >= this.o.healthyAfterMs) ||
          this.o.activity.containerActivity(c.id) !== undefined,
      );
    if (healthy) {
      this.starter.failures.reset(stub.id);
      this.killedForMemory.delete(stub.id);
    }
  }

  /**
   * Stops what containersToStop picks; returns why each stopped. A gang is
   * one candidate (busy when any member is, idle since its latest member)
   * and stops whole.
   */
  private scaleDown(stub: StubRecord, desired: number, draining: boolean, now: number): StopReason[] {
    const running = this.containers.live((c) => c.stubId === stub.id && c.state === "running");
    const units = new Map<string, StopCandidate>();
    for (const c of running) {
      const a = this.o.activity.containerActivity(c.id);
      const id = unitOf(c);
      const had = units.get(id);
      const idleSince = Math.max(a?.lastActiveAt ?? 0, c.since);
      units.set(id, {
        id,
        busy: a?.busy === true || had?.busy === true,
        idleSince: Math.max(idleSince, had?.idleSince ?? 0),
        outdated: this.outdated(c, stub) || had?.outdated === true,
      });
    }
    const stops = containersToStop({
      candidates: [...units.values()],
      current: this.currentUnits(stub),
      keep: desired,
      keepWarmMs: stub.config.keep_warm_seconds * 1000,
      now,
      draining,
    });
    for (const { id, reason } of stops) {
      const idleMs = now - (units.get(id)?.idleSince ?? now);
      for (const c of this.containers.live((c) => c.stubId === stub.id && unitOf(c) === id)) {
        this.o.log.info(
          {
            containerId: c.id,
            stubId: stub.id,
            agentId: c.agentId,
            idleMs,
            reason,
            ...(c.gang ? { gangId: c.gang.id, rank: c.gang.rank } : {}),
          },
          `stopping a container: ${reason}`,
        );
        void this.track(this.stopMember(c));
      }
    }
    return stops.map((s) => s.reason);
  }

  /**
   * stopOne(), except for a gang member still starting: it is marked and
   * its start ends it (starter.ts), so no stop reaches its agent before
   * the container is there.
   */
  private async stopMember(c: Managed): Promise<void> {
    if (c.gang && c.state === "starting") {
      c.stopRequested = true;
      this.containers.setState(c, "stopping");
      return;
    }
    await this.stopOne(c);
  }

  /** Ends a gang: its members still live are stopped, with `why` (naming the rank and cause) logged. */
  private endGang(gangId: string, why: string): void {
    const rest = this.containers.live((c) => c.gang?.id === gangId);
    if (rest.length === 0) return;
    this.o.log.warn({ gangId, stubId: rest[0]?.stubId, containers: rest.map((c) => c.id), reason: why }, why);
    for (const c of rest) void this.track(this.stopMember(c));
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
        const oom = e.reason === "oom_killed";
        const beforeTask = this.o.activity.containerActivity(c.id) === undefined;
        if (oom && beforeTask) this.killedForMemory.add(c.stubId);
        if ((lived < this.o.healthyAfterMs || oom) && beforeTask) {
          const after = `${Math.round(lived / 1000)} s after it started, before taking a task`;
          // A model server loading its weights is the usual case: say which parameter to raise.
          const why = oom
            ? `runner container ${c.id} ended ${after} (code ${e.exitCode ?? "?"}): ${memoryKillMessage(e.memoryBytes)}`
            : `runner container ${c.id} ended (${e.reason ?? "exited"}, code ${e.exitCode ?? "?"}) ${after}; see its logs`;
          void this.track(
            this.starter.noteFailure(c.stubId, now, { deterministic: false, code: "internal", message: why }),
          );
        }
      }
      // A member that ended by itself (or whose agent is gone) ends its gang: the others cannot go on without it.
      if (c.gang && !c.stopRequested)
        this.endGang(
          c.gang.id,
          gangEndMessage(
            c.gang.id,
            c.gang.rank,
            `exited (${e.reason ?? "exited"}, code ${e.exitCode ?? "?"})`,
          ),
        );
      if (c.stopRequested) return;
    }
    if (!this.stopped) void this.track(this.fleet.removeOnAgent(e.agentId, e.containerId));
    this.scheduleReconcile();
  }

  // ---- scale up ---------------------------------------------------------------

  /**
   * Starts containers up to `desired` (outdated ones do not count), each
   * only while the workspace stays within its limits; past one, the stub
   * waits with that limit as its reason (and the planner may stop idle warm
   * containers of the workspace's other stubs to make room).
   */
  private async scaleUp(stub: StubRecord, desired: number, now: number): Promise<void> {
    if (this.starter.failures.blocked(stub.id, now)) return;
    const missing = desired - this.currentUnits(stub);
    if (missing <= 0) return this.starter.notWaiting(stub.id);
    const limits = await this.workspaceLimits(stub.workspaceId, now);
    for (let i = 0; i < missing; i++) {
      if (!this.starter.placeOne(stub, limits)) return;
    }
  }
}
