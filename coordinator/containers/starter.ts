// Starting one container of a stub: placement, the code push, secrets and
// RunContainer; and what a failed start means for the stub's waiting tasks
// (backoff, or failing them when it can never work).

import { randomBytes } from "node:crypto";
import { describeError } from "../../shared/errors.ts";
import type { StubWait } from "../tasks/index.ts";
import { stubBucketMounts } from "../volumes/index.ts";
import type { CodePusher } from "./code-push.ts";
import { type ContainerTable, type Managed, RUNNER_KIND } from "./container-table.ts";
import type { FleetSync } from "./fleet-sync.ts";
import { gangEndMessage, gangSize, newGangId, pickVni } from "./gangs.ts";
import { DEFAULT_GANG_SUBNET, GANG_MASTER_PORT } from "../../shared/gang.ts";
import type { GangMember } from "../../api/index.ts";
import type { Plan, PlacementRequest, Reservation, ReserveRequest } from "../scheduler/index.ts";
import { applyGang, applyWorkspaceRuntime, placementRequest } from "./runner-request.ts";
import { SecretsError, StartFailures, classifyStartError } from "./start-failures.ts";
import type {
  ResolvedContainerManagerOptions,
  StubRecord,
  WorkspaceContainerLimits,
  WorkspaceRuntime,
} from "./types.ts";

export interface StarterDeps {
  o: ResolvedContainerManagerOptions;
  containers: ContainerTable;
  code: CodePusher;
  fleet: FleetSync;
  track<T>(p: Promise<T>): Promise<T>;
  /** Stops the gang's members still live (one could not start, or exited): `why` names the rank and cause. */
  endGang(gangId: string, why: string): void;
}

/** A limit as the limits route names it (maxGpus: max_gpus). */
const limitName = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** What the planner is asked to reserve for container `id` of the stub. */
function reservationRequest(
  stub: StubRecord,
  id: string,
  placement: PlacementRequest,
  limits: WorkspaceContainerLimits | undefined,
): ReserveRequest {
  return {
    id,
    kind: RUNNER_KIND,
    workspaceId: stub.workspaceId,
    stubId: stub.id,
    placement,
    ...(stub.extra.priority ? { priority: stub.extra.priority } : {}),
    ...(limits ? { limits } : {}),
    ...(stub.imageAgents ? { onlyAgents: stub.imageAgents } : {}),
  };
}

/** The manager's record of container `id`, placed at `r` and about to start. */
function startingRecord(stub: StubRecord, id: string, r: Reservation, now: number): Managed {
  return {
    id,
    stubId: stub.id,
    workspaceId: stub.workspaceId,
    agentId: r.agentId,
    state: "starting",
    since: now,
    stopRequested: false,
    configVersion: stub.configVersion,
    reservation: r,
  };
}

/** How long a placed runner waits for the idle containers stopped to make room for it, beyond their stop grace. */
const ROOM_WAIT_MS = 30_000;

export class ContainerStarter {
  readonly failures: StartFailures;
  private readonly lastWait = new Map<string, StubWait>();

  constructor(private readonly d: StarterDeps) {
    this.failures = new StartFailures(d.o.startBackoff);
  }

  /**
   * Places and starts one container through the planner (room and the
   * workspace's limits, idle warm containers of other stubs stopped to make
   * room); false when nothing more can be placed now.
   */
  placeOne(stub: StubRecord, limits?: WorkspaceContainerLimits): boolean {
    const { o, containers, code } = this.d;
    if (stub.imageError) {
      void this.d.track(this.failPending(stub.id, "not_found", stub.imageError));
      return false;
    }
    const size = gangSize(stub);
    if (size > 1) return this.placeGang(stub, size, limits);
    const sha = stub.extra.code_sha256;
    const prefer = new Set(sha ? code.holders(sha) : []);
    for (const c of containers.live((c) => c.stubId === stub.id)) prefer.add(c.agentId);
    const req = placementRequest(stub, [...prefer]);
    const id = `ctr-${randomBytes(8).toString("hex")}`;
    const placed = o.planner.reserve(reservationRequest(stub, id, req, limits));
    if (!placed.ok) return this.refused(stub, placed);
    this.lastWait.delete(stub.id);
    const r = placed.reservation;
    if (placed.stopping.length > 0)
      o.log.info(
        { stubId: stub.id, containerId: id, agentId: r.agentId, stopping: placed.stopping },
        `stopping idle warm containers ${placed.stopping.join(", ")} to make room for a container of ${stub.id}`,
      );
    const c = startingRecord(stub, id, r, o.clock());
    containers.add(c);
    void this.d.track(this.startOne(c, stub, r.gpuType, placed.stopping.length > 0, limits));
    return true;
  }

  /** Records why the stub cannot place a container now (or ever); false, for placeOne's caller. */
  private refused(stub: StubRecord, placed: Extract<Plan, { ok: false }>): false {
    const { o } = this.d;
    if (placed.permanent && placed.limit) {
      this.waiting(stub.id, `${placed.reason}; it cannot start until an operator raises the limit`, {
        kind: "workspace_limit",
        limit: limitName(placed.limit),
      });
    } else if (placed.permanent) {
      o.log.warn({ stubId: stub.id, reason: placed.reason }, "no agent can ever run this stub's containers");
      void this.d.track(this.failPending(stub.id, "unplaceable", placed.reason));
    } else if (placed.limit) {
      this.waiting(stub.id, placed.reason, { kind: "workspace_limit", limit: limitName(placed.limit) });
    } else {
      this.waiting(stub.id, placed.reason, { kind: placed.noAgents ? "no_agent" : "no_room" });
    }
    return false;
  }

  /**
   * A gang stub's placeOne: extra.nodes containers on as many agents, all
   * or none (Planner.reserveGang), one gang id and a VNI no live gang uses;
   * each member starts like any runner, with its rank's `gang` on the
   * request. A member that cannot start ends the gang (startOne).
   */
  private placeGang(stub: StubRecord, size: number, limits?: WorkspaceContainerLimits): boolean {
    const { o, containers, code } = this.d;
    const sha = stub.extra.code_sha256;
    const req = placementRequest(stub, sha ? code.holders(sha) : []);
    const ids = Array.from({ length: size }, () => `ctr-${randomBytes(8).toString("hex")}`);
    const placed = o.planner.reserveGang(ids.map((id) => reservationRequest(stub, id, req, limits)));
    if (!placed.ok) return this.refused(stub, placed);
    this.lastWait.delete(stub.id);
    const used = new Set<number>();
    for (const c of containers.all()) if (c.gang?.vni !== undefined) used.add(c.gang.vni);
    const gang: Omit<GangMember, "rank"> = {
      id: newGangId(),
      vni: pickVni(used),
      size,
      hosts: placed.members.map((m) => m.gangAddress),
      subnet: DEFAULT_GANG_SUBNET,
      masterPort: GANG_MASTER_PORT,
    };
    o.log.info(
      {
        stubId: stub.id,
        gangId: gang.id,
        vni: gang.vni,
        agents: placed.members.map((m) => m.reservation.agentId),
      },
      `starting gang ${gang.id} of ${size} containers for ${stub.id}`,
    );
    for (const [rank, m] of placed.members.entries()) {
      const r = m.reservation;
      const c: Managed = { ...startingRecord(stub, r.id, r, o.clock()), gang: { ...gang, rank } };
      containers.add(c);
      void this.d.track(this.startOne(c, stub, r.gpuType, m.stopping.length > 0, limits));
    }
    return true;
  }

  private async startOne(
    c: Managed,
    stub: StubRecord,
    gpuType: string | undefined,
    afterStops: boolean,
    /** How the workspace's operator set its containers to run, over the stub's own choice. */
    runtime: WorkspaceRuntime | undefined,
  ): Promise<void> {
    const { o, containers } = this.d;
    const log = o.log.child({ containerId: c.id, stubId: stub.id, agentId: c.agentId });
    if (afterStops) {
      try {
        await o.planner.whenReady(c.id, o.stopGraceMs + ROOM_WAIT_MS);
      } catch (err) {
        // Not a failed start: the room did not come free; the next reconcile plans again.
        containers.remove(c);
        log.warn({ err }, `gave up a placement: ${describeError(err)}`);
        return;
      }
      if (!containers.holds(c)) return;
      if (this.endedGang(c)) return;
    }
    try {
      const api = this.d.fleet.api(c.agentId);
      const secretEnv = await this.secretEnv(stub);
      // Keys of the stub's CloudBuckets, from the secrets the config names (docs/buckets.md).
      const buckets = await stubBucketMounts(stub, o.secrets).catch((e: unknown) => {
        throw new SecretsError(e);
      });
      if (stub.extra.code_sha256) await this.d.code.ensure(c.agentId, stub.extra.code_sha256, api);
      const req = o.containerRequest(stub, c.id, gpuType, secretEnv);
      applyWorkspaceRuntime(req, runtime);
      if (buckets.length > 0) req.buckets = buckets;
      if (c.gang) applyGang(req, c.gang as GangMember);
      if (this.endedGang(c)) return;
      const status = await api.runContainer(req);
      // Its gang ended while it started: it goes at once, unused.
      if (c.gang && c.stopRequested) {
        await api.stopContainer(c.id, { graceMs: 0, remove: true }).catch(() => {});
        containers.remove(c);
        return;
      }
      if (!containers.holds(c)) return; // exited already, or its agent is gone
      o.planner.assignGpus(c.id, status.gpus);
      if (c.state === "starting") {
        c.since = o.clock();
        containers.setState(c, "running");
      }
      log.info("runner container started");
    } catch (err) {
      containers.remove(c);
      const failure = classifyStartError(err);
      // A member of a gang that already ended (another rank failed first) adds no failure of its own.
      if (c.gang && c.stopRequested) return;
      log.warn({ err, code: failure.code }, `cannot start a runner container: ${failure.message}`);
      // One member that cannot start ends the gang: the others are stopped and their room released.
      if (c.gang)
        this.d.endGang(
          c.gang.id,
          gangEndMessage(c.gang.id, c.gang.rank, `could not start (${failure.message})`),
        );
      await this.noteFailure(stub.id, o.clock(), failure);
    }
  }

  /** A starting member whose gang ended: forgotten (its room released) before it reaches its agent. */
  private endedGang(c: Managed): boolean {
    if (!c.gang || !c.stopRequested) return false;
    this.d.containers.remove(c);
    return true;
  }

  /** Read at every start, so an updated secret reaches the next container. */
  private async secretEnv(stub: StubRecord): Promise<Record<string, string> | undefined> {
    const names = stub.extra.secrets ?? [];
    if (names.length === 0) return undefined;
    try {
      return await this.d.o.secrets.resolve(stub.workspaceId, names);
    } catch (e) {
      throw new SecretsError(e);
    }
  }

  async noteFailure(
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
        `no runner container could start after ${this.d.o.startBackoff.maxAttempts} attempts; last error: ${f.message}`,
      );
    }
  }

  private async failPending(stubId: string, code: string, message: string): Promise<void> {
    const { activity, log } = this.d.o;
    try {
      const n = await activity.failPending(stubId, { code, message });
      if (n > 0) log.warn({ stubId, tasks: n, code }, `failed waiting tasks: ${message}`);
    } catch (err) {
      log.error({ err, stubId }, `cannot fail the waiting tasks: ${describeError(err)}`);
    }
  }

  /**
   * Records the planner's latest refusal for the stub (what `berth task get`
   * shows) and logs it once per distinct reason; kept until the stub no
   * longer waits.
   */
  waiting(stubId: string, reason: string, how: Pick<StubWait, "kind" | "limit">): void {
    const last = this.lastWait.get(stubId);
    if (last?.message === reason && last.kind === how.kind) return;
    const since = last?.kind === how.kind ? last.since : this.d.o.clock();
    this.lastWait.set(stubId, { ...how, message: reason, since });
    this.d.o.log.info({ stubId, reason }, `tasks wait for room to start a container: ${reason}`);
  }

  /** Why the stub's tasks wait for a container now; undefined when they do not. */
  waitReason(stubId: string): string | undefined {
    return this.lastWait.get(stubId)?.message;
  }

  /** The planner's latest refusal for the stub, as recorded by waiting(). */
  lastRefusal(stubId: string): StubWait | undefined {
    return this.lastWait.get(stubId);
  }

  /** The stub has the containers it wants: a later wait is logged again. */
  notWaiting(stubId: string): void {
    this.lastWait.delete(stubId);
  }

  /** The stub left the manager's view: its log-once memory goes. */
  forget(stubId: string): void {
    this.lastWait.delete(stubId);
  }
}
