// Containers on demand: keeps enough runner containers for each stub's
// waiting and running tasks (docs/tasks.md step 4), within the workspace's
// limit, and stops the ones idle past keep_warm_seconds. Runners pull from the
// stub's shared consumer, so warm containers are reused by the next tasks.

import { randomBytes } from "node:crypto";
import type { ContainerApi } from "../../agent/rpc/container-api.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import type { ContainerCounts, StubDemand } from "../tasks/activity.ts";
import { buildClusterView } from "../scheduler/cluster-view.ts";
import { ContainerTable, type Managed, adoptedRecord } from "./container-table.ts";
import { place } from "../scheduler/place.ts";
import { CodePusher } from "./code-push.ts";
import { placementRequest, workersOf } from "./runner-request.ts";
import { SecretsError, StartFailures, classifyStartError } from "./start-failures.ts";
import {
  type ContainerManagerOptions,
  type ManagedContainerInfo,
  type ResolvedContainerManagerOptions,
  type StubRecord,
  resolveContainerManagerOptions,
} from "./types.ts";

const SYNC_RETRY_MS = 5000;
const DEMAND_RECONCILE_GAP_MS = 20;

export class ContainerManager implements ContainerCounts {
  private readonly o: ResolvedContainerManagerOptions;
  private readonly containers = new ContainerTable();
  private readonly code: CodePusher;
  private readonly failures: StartFailures;
  private readonly stubCache = new Map<string, { stub: StubRecord | undefined; at: number }>();
  /** Agents whose existing managed containers are known (adopted at first sight). */
  private readonly synced = new Set<string>();
  private readonly syncing = new Map<string, Promise<void>>();
  private readonly syncRetryAt = new Map<string, number>();
  private readonly lastWait = new Map<string, string>();
  private readonly work = new Set<Promise<unknown>>();
  private timer?: NodeJS.Timeout;
  private unsubscribers: (() => void)[] = [];
  private reconciling?: Promise<void>;
  private rerun = false;
  private tickQueued = false;
  private lastReconcileAt = 0;
  private readonly limitCache = new Map<string, { limit: number; at: number }>();
  private stopped = false;

  constructor(options: ContainerManagerOptions) {
    this.o = resolveContainerManagerOptions(options);
    this.code = new CodePusher(this.o.code);
    this.failures = new StartFailures(this.o.startBackoff);
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

  /** Failed start rounds of a stub since its last healthy container. */
  startAttempts(stubId: string): number {
    return this.failures.attempts(stubId);
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
    this.syncFleet();
    const demand = new Map<string, StubDemand>(this.o.activity.demand().map((d) => [d.stubId, d]));
    const stubIds = new Set([...demand.keys(), ...this.containers.stubIds()]);
    for (const stubId of stubIds) {
      if (this.stopped) return;
      try {
        await this.reconcileStub(stubId, demand.get(stubId), now);
      } catch (err) {
        this.o.log.error({ err, stubId }, "container reconcile of a stub failed");
      }
    }
  }

  private async reconcileStub(stubId: string, d: StubDemand | undefined, now: number): Promise<void> {
    const stub = await this.stub(stubId, now);
    if (!stub) {
      // The stub was deleted: nothing will use its containers again.
      for (const c of this.containers.live((c) => c.stubId === stubId && c.state === "running"))
        void this.track(this.stopOne(c));
      return;
    }
    const tasks = d ? d.pending + d.running : 0;
    this.noteHealthy(stub, now);
    this.stopIdle(stub, tasks, now);
    if (d && d.pending > 0) await this.scaleUp(stub, tasks, now);
  }

  /** Cached like stubs: scale-up asks on every reconcile while tasks wait. */
  private async workspaceLimit(workspaceId: string, now: number): Promise<number> {
    const hit = this.limitCache.get(workspaceId);
    if (hit && now - hit.at < this.o.stubCacheMs) return hit.limit;
    const limit = await this.o.workspaceLimit(workspaceId);
    this.limitCache.set(workspaceId, { limit, at: now });
    return limit;
  }

  private async stub(stubId: string, now: number): Promise<StubRecord | undefined> {
    const hit = this.stubCache.get(stubId);
    if (hit && now - hit.at < this.o.stubCacheMs) return hit.stub;
    const stub = await this.o.stubs.get(stubId);
    this.stubCache.set(stubId, { stub, at: now });
    return stub;
  }

  // ---- fleet ----------------------------------------------------------------

  /** Forgets containers on agents that are gone and adopts the managed containers of agents seen anew. */
  private syncFleet(): void {
    for (const a of this.o.fleet.list()) {
      if (a.state !== "ready") this.forgetAgent(a.agentId);
      else if (
        !this.synced.has(a.agentId) &&
        !this.syncing.has(a.agentId) &&
        this.o.clock() >= (this.syncRetryAt.get(a.agentId) ?? 0)
      ) {
        const p = this.track(this.adopt(a.agentId)).finally(() => this.syncing.delete(a.agentId));
        this.syncing.set(a.agentId, p);
      }
    }
    for (const c of this.containers.all()) if (!this.o.fleet.get(c.agentId)) this.forgetAgent(c.agentId);
  }

  private forgetAgent(agentId: string): void {
    const had = this.synced.delete(agentId);
    const forgot = this.containers.forgetAgent(agentId);
    this.code.forgetAgent(agentId);
    if (had || forgot > 0) {
      this.o.agents.release?.(agentId);
      this.o.log.info({ agentId, containers: forgot }, `agent ${agentId} is gone; forgot its containers`);
    }
  }

  /** Containers this coordinator (or a previous run of it) started there: tracked so their resources count. */
  private async adopt(agentId: string): Promise<void> {
    let found: Awaited<ReturnType<ContainerApi["listContainers"]>>;
    try {
      found = await this.api(agentId).listContainers({ labels: { [RunnerLabels.managed]: "1" } });
    } catch (err) {
      this.o.log.warn({ err, agentId }, `cannot list containers on agent ${agentId}; not placing there yet`);
      this.syncRetryAt.set(agentId, this.o.clock() + SYNC_RETRY_MS);
      return;
    }
    const view = buildClusterView(this.o.fleet.list(), []).agents.find((a) => a.agentId === agentId);
    if (!view || this.o.fleet.get(agentId)?.state !== "ready") return;
    for (const s of found) {
      if (this.containers.has(s.id)) continue;
      if (s.state === "stopped") {
        void this.track(this.removeOnAgent(agentId, s.id));
        continue;
      }
      const record = adoptedRecord(s, view, this.o.clock());
      if (record) this.containers.add(record);
    }
    this.synced.add(agentId);
    this.syncRetryAt.delete(agentId);
    if (found.length > 0)
      this.o.log.info({ agentId, containers: found.length }, "adopted managed containers");
    // The agent takes containers from now on.
    if (!this.stopped) void this.reconcile();
  }

  private api(agentId: string): ContainerApi {
    return this.o.agents.client(agentId);
  }

  // ---- scale down -------------------------------------------------------------

  /** A container that lived past healthyAfterMs or took a task ends the stub's failure streak. */
  private noteHealthy(stub: StubRecord, now: number): void {
    if (this.failures.attempts(stub.id) === 0) return;
    const healthy = this.containers
      .live((c) => c.stubId === stub.id && c.state === "running")
      .some(
        (c) =>
          now - c.since >= this.o.healthyAfterMs || this.o.activity.containerActivity(c.id) !== undefined,
      );
    if (healthy) this.failures.reset(stub.id);
  }

  private stopIdle(stub: StubRecord, tasks: number, now: number): void {
    const keepWarmMs = stub.config.keep_warm_seconds * 1000;
    // -1: never scale to zero (spec).
    if (!(keepWarmMs >= 0)) return;
    const live = this.containers.live((c) => c.stubId === stub.id);
    let excess = live.length - Math.ceil(tasks / workersOf(stub));
    if (excess <= 0) return;
    const idle = live
      .filter((c) => c.state === "running")
      .map((c) => ({ c, a: this.o.activity.containerActivity(c.id) }))
      .filter((x) => !x.a?.busy)
      .map((x) => ({ c: x.c, idleSince: Math.max(x.a?.lastActiveAt ?? 0, x.c.since) }))
      .filter((x) => now - x.idleSince >= keepWarmMs)
      .sort((a, b) => a.idleSince - b.idleSince);
    for (const { c, idleSince } of idle) {
      if (excess-- <= 0) break;
      this.o.log.info(
        { containerId: c.id, stubId: stub.id, agentId: c.agentId, idleMs: now - idleSince },
        "stopping an idle container (keep_warm_seconds passed)",
      );
      void this.track(this.stopOne(c));
    }
  }

  private async stopOne(c: Managed): Promise<void> {
    c.state = "stopping";
    c.stopRequested = true;
    try {
      await this.api(c.agentId).stopContainer(c.id, { graceMs: this.o.stopGraceMs, remove: true });
    } catch (err) {
      if (!(err instanceof BerthError && err.code === "not_found")) {
        this.o.log.warn(
          { err, containerId: c.id, agentId: c.agentId },
          "cannot stop a container; will retry",
        );
        if (this.containers.holds(c)) c.state = "running";
        return;
      }
    }
    this.containers.remove(c);
  }

  private async removeOnAgent(agentId: string, containerId: string): Promise<void> {
    try {
      await this.api(agentId).stopContainer(containerId, { graceMs: 0, remove: true });
    } catch (err) {
      if (err instanceof BerthError && err.code === "not_found") return;
      this.o.log.warn({ err, containerId, agentId }, "cannot remove an exited container");
    }
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
            this.noteFailure(c.stubId, now, { deterministic: false, code: "internal", message: why }),
          );
        }
      }
      if (c.stopRequested) return;
    }
    if (!this.stopped) void this.track(this.removeOnAgent(e.agentId, e.containerId));
    this.scheduleReconcile();
  }

  // ---- scale up ---------------------------------------------------------------

  private async scaleUp(stub: StubRecord, tasks: number, now: number): Promise<void> {
    if (this.failures.blocked(stub.id, now)) return;
    const need = Math.ceil(tasks / workersOf(stub));
    const current = this.containers.live((c) => c.stubId === stub.id).length;
    if (current >= need) return;
    const limit = await this.workspaceLimit(stub.workspaceId, now);
    const inWorkspace = this.containers.live((c) => c.workspaceId === stub.workspaceId).length;
    const count = Math.min(need - current, limit - inWorkspace);
    if (count <= 0) {
      this.waiting(stub.id, `the workspace runs ${inWorkspace} of its ${limit} containers`);
      return;
    }
    for (let i = 0; i < count; i++) {
      if (!this.placeOne(stub)) return;
    }
  }

  /** Places and starts one container; false when nothing more can be placed now. */
  private placeOne(stub: StubRecord): boolean {
    const sha = stub.extra.code_sha256;
    const prefer = new Set(sha ? this.code.holders(sha) : []);
    for (const c of this.containers.live((c) => c.stubId === stub.id)) prefer.add(c.agentId);
    const req = placementRequest(stub, [...prefer]);
    const view = buildClusterView(this.o.fleet.list(), this.containers.reservations(), (id) =>
      this.synced.has(id),
    );
    const placed = place(view, req);
    if (!placed.ok) {
      if (placed.permanent) {
        this.o.log.warn(
          { stubId: stub.id, reason: placed.reason },
          "no agent can ever run this stub's containers",
        );
        void this.track(this.failPending(stub.id, "resource_exhausted", placed.reason));
      } else {
        this.waiting(stub.id, placed.reason);
        this.yieldIdleFor(stub);
      }
      return false;
    }
    this.lastWait.delete(stub.id);
    const c: Managed = {
      id: `ctr-${randomBytes(8).toString("hex")}`,
      stubId: stub.id,
      workspaceId: stub.workspaceId,
      agentId: placed.agentId,
      state: "starting",
      since: this.o.clock(),
      stopRequested: false,
      reservation: {
        agentId: placed.agentId,
        cpuMillicores: req.cpuMillicores,
        memoryBytes: req.memoryBytes,
        gpuCount: req.gpuCount,
        ...(placed.gpuType ? { gpuType: placed.gpuType } : {}),
      },
    };
    this.containers.add(c);
    void this.track(this.startOne(c, stub, placed.gpuType));
    return true;
  }

  private async startOne(c: Managed, stub: StubRecord, gpuType: string | undefined): Promise<void> {
    const log = this.o.log.child({ containerId: c.id, stubId: stub.id, agentId: c.agentId });
    try {
      const api = this.api(c.agentId);
      const secretEnv = await this.secretEnv(stub);
      if (stub.extra.code_sha256) await this.code.ensure(c.agentId, stub.extra.code_sha256, api);
      const status = await api.runContainer(this.o.containerRequest(stub, c.id, gpuType, secretEnv));
      if (!this.containers.holds(c)) return; // exited already, or its agent is gone
      c.reservation.gpuUuids = status.gpus;
      if (c.state === "starting") {
        c.state = "running";
        c.since = this.o.clock();
      }
      log.info("runner container started");
    } catch (err) {
      this.containers.remove(c);
      const failure = classifyStartError(err);
      log.warn({ err, code: failure.code }, `cannot start a runner container: ${failure.message}`);
      await this.noteFailure(stub.id, this.o.clock(), failure);
    }
  }

  /** Read at every start, so an updated secret reaches the next container. */
  private async secretEnv(stub: StubRecord): Promise<Record<string, string> | undefined> {
    const names = stub.extra.secrets ?? [];
    if (names.length === 0) return undefined;
    try {
      return await this.o.secrets.resolve(stub.workspaceId, names);
    } catch (e) {
      throw new SecretsError(e);
    }
  }

  private async noteFailure(
    stubId: string,
    now: number,
    f: { deterministic: boolean; code: string; message: string },
  ): Promise<void> {
    const exhausted = this.failures.record(stubId, now, f.message);
    if (f.deterministic) await this.failPending(stubId, f.code, f.message);
    else if (exhausted) {
      await this.failPending(
        stubId,
        f.code,
        `no runner container could start after ${this.o.startBackoff.maxAttempts} attempts; last error: ${f.message}`,
      );
    }
  }

  private async failPending(stubId: string, code: string, message: string): Promise<void> {
    try {
      const n = await this.o.activity.failPending(stubId, { code, message });
      if (n > 0) this.o.log.warn({ stubId, tasks: n, code }, `failed waiting tasks: ${message}`);
    } catch (err) {
      this.o.log.error({ err, stubId }, `cannot fail the waiting tasks: ${describeError(err)}`);
    }
  }

  /** Logs why a stub waits, once per distinct reason. */
  /**
   * A warm container keeps its room while idle; when tasks of another stub
   * cannot be placed, the longest-idle container of a stub with no tasks at
   * all gives its room up (one per failed placement: the next pass places,
   * or takes another).
   */
  private yieldIdleFor(stub: StubRecord): void {
    const victim = this.containers
      .live((c) => c.stubId !== stub.id && c.state === "running")
      .filter((c) => {
        const d = this.o.activity.demandOf(c.stubId);
        return !this.o.activity.containerActivity(c.id)?.busy && !d?.pending && !d?.running;
      })
      .map((c) => ({
        c,
        idleSince: Math.max(this.o.activity.containerActivity(c.id)?.lastActiveAt ?? 0, c.since),
      }))
      .sort((a, b) => a.idleSince - b.idleSince)[0];
    if (!victim) return;
    this.o.log.info(
      { containerId: victim.c.id, stubId: victim.c.stubId, forStubId: stub.id, agentId: victim.c.agentId },
      "stopping an idle warm container to make room for waiting tasks",
    );
    void this.track(this.stopOne(victim.c));
  }

  private waiting(stubId: string, reason: string): void {
    if (this.lastWait.get(stubId) === reason) return;
    this.lastWait.set(stubId, reason);
    this.o.log.info({ stubId, reason }, "tasks wait for room to start a container");
  }
}
