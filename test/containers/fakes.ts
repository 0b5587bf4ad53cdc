// Fakes for the container manager's logic tests: a TaskActivity whose demand
// the test sets, agents that record calls (the shared FakeContainerApi), an
// event source the test feeds, and a fleet of real FleetView agents.

import pino from "pino";
import { ContainerManager } from "../../coordinator/containers/manager.ts";
import type {
  ContainerManagerOptions,
  DeploymentStates,
  StubRecord,
} from "../../coordinator/containers/types.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { Planner } from "../../coordinator/scheduler/planner.ts";
import type { StubDemand, TaskActivity } from "../../coordinator/tasks/activity.ts";
import { BerthError } from "../../shared/errors.ts";
import type { Heartbeat, HostCapacity } from "../../shared/fleet.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

export const GiB = 1024 ** 3;

export class FakeActivity implements TaskActivity {
  readonly demands = new Map<string, StubDemand>();
  readonly activity = new Map<string, { busy: boolean; lastActiveAt: number }>();
  readonly failed: { stubId: string; code: string; message: string }[] = [];
  private readonly listeners = new Set<(stubId: string) => void>();

  set(stubId: string, pending: number, running = 0, workspaceId = "ws-1"): void {
    if (pending + running === 0) this.demands.delete(stubId);
    else this.demands.set(stubId, { stubId, workspaceId, pending, running });
    for (const l of this.listeners) l(stubId);
  }
  demand(): StubDemand[] {
    return [...this.demands.values()];
  }
  demandOf(stubId: string): StubDemand | undefined {
    return this.demands.get(stubId);
  }
  containerActivity(id: string) {
    return this.activity.get(id);
  }
  onDemandChange(listener: (stubId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  /** Containers whose RUNNING tasks the manager asked to requeue as preempted. */
  readonly preempted: { containerId: string; message: string }[] = [];
  requeuePreempted(containerId: string, message: string): number {
    this.preempted.push({ containerId, message });
    return 1;
  }
  async failPending(stubId: string, error: { code: string; message: string }): Promise<number> {
    this.failed.push({ stubId, ...error });
    const d = this.demands.get(stubId);
    const n = d?.pending ?? 0;
    if (d) this.set(stubId, 0, d.running, d.workspaceId);
    return n;
  }
}

/** Deployment states the test sets per stub; a stub not set belongs to no deployment. */
export class FakeDeployments implements DeploymentStates {
  readonly states = new Map<string, { active: boolean; minContainers: number }>();

  set(stubId: string, active: boolean, minContainers = 0): void {
    this.states.set(stubId, { active, minContainers });
  }
  of(stubId: string) {
    return this.states.get(stubId);
  }
  baselines() {
    return [...this.states]
      .filter(([, s]) => s.active && s.minContainers > 0)
      .map(([stubId, s]) => ({ stubId, minContainers: s.minContainers }));
  }
}

/**
 * The agent calls the container manager never makes (logs, images, exec,
 * network): a fake agent of its world refuses them, so one that is made
 * fails the test.
 */
export const UNUSED_BY_THE_MANAGER = [
  "streamLogs",
  "pullImage",
  "listImages",
  "removeImage",
  "importImage",
  "gcImages",
  "getContainer",
  "exec",
  "setNetworkPolicy",
  "exposePort",
];

export function capacity(
  cpuCores: number,
  memGiB: number,
  gpus: { type: string; uuid: string }[] = [],
): HostCapacity {
  return {
    cpuCores,
    memoryBytes: memGiB * GiB,
    disk: { path: "/", totalBytes: 1, freeBytes: 1 },
    gpus: {
      available: gpus.length > 0,
      toolkit: true,
      devices: gpus.map((g, index) => ({ index, model: g.type, memoryMiB: 1, ...g })),
    },
  };
}

/** A fleet of one agent seen just now, with a heartbeat interval long enough that it never goes lost in a test. */
export function oneAgentFleet(agentId: string, cap: HostCapacity): FleetView {
  return fleetOf([[agentId, cap]]);
}

/**
 * A fleet of these agents, each seen just now, with heartbeat intervals long
 * enough that none goes lost in a test; `more`: other heartbeat fields (a pool,
 * a proxy address, a node address for gangs).
 */
export function fleetOf(
  agents: [
    agentId: string,
    cap: HostCapacity,
    more?: Partial<Pick<Heartbeat, "pool" | "proxyAddress" | "nodeAddress" | "grpcAddress">>,
  ][],
): FleetView {
  const fleet = new FleetView();
  const now = Date.now();
  for (const [agentId, cap, more] of agents) {
    fleet.observe(
      {
        agentId,
        hostname: agentId,
        version: "t",
        sentAt: now,
        intervalMs: 600_000,
        grpcAddress: "127.0.0.1:1",
        capacity: cap,
        ...more,
      },
      now,
    );
  }
  return fleet;
}

export function stubRecord(
  id: string,
  over: {
    config?: Partial<StubConfig>;
    extra?: Partial<StubExtra>;
    workspaceId?: string;
    type?: string;
    configVersion?: number;
  } = {},
): StubRecord {
  const config = stubConfig({ runtime: { cpu: 1, gpu: "", memory: 512, image_id: "" }, ...over.config });
  const extra = stubExtra(over.extra);
  return {
    id,
    workspaceId: over.workspaceId ?? "ws-1",
    name: id,
    type: over.type ?? "function",
    config,
    extra,
    configVersion: over.configVersion ?? 1,
  };
}

export interface World {
  mgr: ContainerManager;
  /** The planner the manager places through (over.planner, or one over this world's fleet). */
  planner: Planner;
  activity: FakeActivity;
  fleet: FleetView;
  agents: Map<string, FakeContainerApi>;
  stubs: Map<string, StubRecord>;
  limits: Map<string, number>;
  objects: Map<string, Buffer>;
  emit(e: Omit<ContainerEventMessage, "at" | "labels"> & { labels?: Record<string, string> }): void;
  clock: { now: number };
  /** One reconcile and everything it started. */
  tick(advanceMs?: number): Promise<void>;
  /** `more`: other heartbeat fields (a node address for gangs). */
  addAgent(id: string, cap: HostCapacity, more?: Partial<Pick<Heartbeat, "nodeAddress">>): FakeContainerApi;
}

export function world(over: Partial<ContainerManagerOptions> = {}): World {
  const clock = { now: 1_000_000 };
  const fleet = new FleetView({ minLostAfterMs: 60_000 });
  const activity = new FakeActivity();
  const agents = new Map<string, FakeContainerApi>();
  const stubs = new Map<string, StubRecord>();
  const limits = new Map<string, number>();
  const objects = new Map<string, Buffer>();
  let handler: ((e: ContainerEventMessage) => void) | undefined;
  const planner = over.planner ?? new Planner({ fleet });
  const mgr = new ContainerManager({
    fleet,
    planner,
    activity,
    stubs: { get: async (id) => stubs.get(id) },
    workspaceLimit: async (ws) => limits.get(ws) ?? 100,
    code: {
      async *open(sha) {
        const b = objects.get(sha);
        if (!b) throw new BerthError("not_found", `object ${sha} not found`);
        yield b.subarray(0, 3);
        yield b.subarray(3);
      },
    },
    agents: {
      client: (id) => {
        const a = agents.get(id);
        if (!a) throw new BerthError("unavailable", `no agent ${id}`);
        return a;
      },
    },
    events: {
      subscribe: (h) => {
        handler = h;
        return () => {
          handler = undefined;
        };
      },
    },
    log: pino({ level: "silent" }),
    clock: () => clock.now,
    stubCacheMs: 1,
    // Tests drive reconciles themselves (tick); the timer only keeps a started manager alive.
    reconcileIntervalMs: 3_600_000,
    ...over,
  });
  const w: World = {
    mgr,
    planner,
    activity,
    fleet,
    agents,
    stubs,
    limits,
    objects,
    clock,
    emit: (e) => handler?.({ at: clock.now, labels: { "berth.managed": "1" }, ...e }),
    async tick(advanceMs = 0) {
      clock.now += advanceMs;
      await mgr.reconcile();
      await mgr.settled();
    },
    addAgent(id, cap, more) {
      const gpus = cap.gpus.devices.map((d) => d.uuid);
      const a = new FakeContainerApi({ agentId: id, gpuUuids: gpus });
      for (const m of UNUSED_BY_THE_MANAGER) a.refused.add(m);
      agents.set(id, a);
      fleet.observe(
        {
          agentId: id,
          hostname: id,
          version: "t",
          sentAt: 0,
          intervalMs: 1000,
          grpcAddress: "x:1",
          capacity: cap,
          ...more,
        },
        clock.now,
      );
      return a;
    },
  };
  return w;
}
