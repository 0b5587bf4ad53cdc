// The containers one manager runs, with what each holds on its agent. Its
// listeners hear when a container becomes running, starts stopping or is
// gone (the endpoint router sends requests to running ones only). With a
// planner, every container it tracks holds its reservation there (kind
// "runner"), released when the container leaves the table.

import type { ContainerStatus } from "../../api/index.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { type AgentView, type Reservation, gpuTypeOf } from "../scheduler/index.ts";
import type { Planner } from "../scheduler/index.ts";
import { type GangPlace, gangFromLabels } from "./gangs.ts";
import { CONFIG_VERSION_LABEL, GANG_VNI_LABEL } from "./runner-request.ts";
import type { ManagedContainerInfo } from "./types.ts";

export interface Managed extends ManagedContainerInfo {
  reservation: Reservation;
  /** Whether this manager stopped it (its exit is expected). */
  stopRequested: boolean;
  /** The stub's config_version it started with; undefined when unknown (adopted without the label). */
  configVersion?: number;
  /** Its place in a gang (gangs.ts): the gang starts, counts and ends as one. */
  gang?: GangPlace;
}

/** The planner's reservation kind of runner containers. */
export const RUNNER_KIND = "runner";

type ChangeListener = (stubId: string) => void;

export class ContainerTable {
  private readonly byId = new Map<string, Managed>();
  private readonly listeners = new Set<ChangeListener>();

  constructor(private readonly planner?: Planner) {}

  /** Returns an unsubscribe. */
  onChange(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(c: Managed): void {
    for (const l of this.listeners) {
      try {
        l(c.stubId);
      } catch {
        // A listener's failure is its own; the table's state is already right.
      }
    }
  }

  /** Moves a tracked container to `state`; listeners hear of running and stopping. */
  setState(c: Managed, state: Managed["state"]): void {
    if (c.state === state) return;
    c.state = state;
    if (this.holds(c) && state !== "starting") this.changed(c);
  }

  get(id: string): Managed | undefined {
    return this.byId.get(id);
  }
  has(id: string): boolean {
    return this.byId.has(id);
  }
  /** Whether `c` is still the tracked record (not forgotten after an exit or a lost agent). */
  holds(c: Managed): boolean {
    return this.byId.get(c.id) === c;
  }
  /** Tracks `c`; one the planner does not hold yet (adopted from an agent) is recorded there. */
  add(c: Managed): void {
    if (this.planner) {
      this.planner.adopt({
        ...c.reservation,
        id: c.id,
        kind: RUNNER_KIND,
        workspaceId: c.workspaceId,
        stubId: c.stubId,
      });
      c.reservation = this.planner.get(c.id) ?? c.reservation;
    }
    this.byId.set(c.id, c);
    if (c.state !== "starting") this.changed(c);
  }
  remove(c: Managed): void {
    if (!this.holds(c)) return;
    this.byId.delete(c.id);
    this.planner?.release(c.id);
    this.changed(c);
  }
  clear(): void {
    const all = this.all();
    this.byId.clear();
    for (const c of all) this.planner?.release(c.id);
    for (const c of all) this.changed(c);
  }
  all(): Managed[] {
    return [...this.byId.values()];
  }
  /** Containers not being stopped that match. */
  live(pred: (c: Managed) => boolean = () => true): Managed[] {
    return this.all().filter((c) => c.state !== "stopping" && pred(c));
  }
  stubIds(): string[] {
    return [...new Set(this.all().map((c) => c.stubId))];
  }
  reservations(): Reservation[] {
    return this.all().map((c) => c.reservation);
  }
  /** Forgets the agent's containers; returns how many. */
  forgetAgent(agentId: string): number {
    let n = 0;
    for (const c of this.all()) {
      if (c.agentId !== agentId) continue;
      this.byId.delete(c.id);
      this.planner?.release(c.id);
      this.changed(c);
      n++;
    }
    return n;
  }
  info(pred: (c: Managed) => boolean = () => true): ManagedContainerInfo[] {
    return this.all()
      .filter(pred)
      .map(({ id, stubId, workspaceId, agentId, state, since }) => ({
        id,
        stubId,
        workspaceId,
        agentId,
        state,
        since,
      }));
  }
}

/** A running managed container found on an agent, as a record; undefined when its labels are incomplete. */
export function adoptedRecord(s: ContainerStatus, agent: AgentView, now: number): Managed | undefined {
  const stubId = s.labels[RunnerLabels.stubId];
  const workspaceId = s.labels[RunnerLabels.workspaceId];
  if (!stubId || !workspaceId) return undefined;
  const gpuType = s.gpus[0] ? gpuTypeOf(agent, s.gpus[0]) : undefined;
  const version = Number(s.labels[CONFIG_VERSION_LABEL]);
  const gang = gangFromLabels(s.labels, GANG_VNI_LABEL);
  return {
    id: s.id,
    stubId,
    workspaceId,
    agentId: agent.agentId,
    state: "running",
    since: s.startedAt ?? now,
    stopRequested: false,
    ...(Number.isInteger(version) && version > 0 ? { configVersion: version } : {}),
    ...(gang ? { gang } : {}),
    reservation: {
      agentId: agent.agentId,
      cpuMillicores: Math.round(s.cpu * 1000),
      memoryBytes: s.memoryBytes,
      gpuCount: s.gpus.length,
      gpuUuids: s.gpus,
      ...(gpuType ? { gpuType } : {}),
      // A share of a shared GPU holds its memory there, not the whole GPU.
      ...(s.gpuMemoryMiB !== undefined ? { gpuMemoryMiB: s.gpuMemoryMiB } : {}),
    },
  };
}
