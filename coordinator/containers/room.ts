// What the container manager offers the planner when a request finds no
// room (coordinator/scheduler/planner.ts, ContainerOwner): its idle warm
// containers, its running containers of preemptible stubs, and the stops
// that give their room up.

import type { IdleCandidate, PreemptCandidate } from "../scheduler/index.ts";
import type { ContainerTable, Managed } from "./container-table.ts";
import type { ResolvedContainerManagerOptions, StubRecord } from "./types.ts";

export interface RoomOffersDeps {
  o: ResolvedContainerManagerOptions;
  containers: ContainerTable;
  /** The stub as last loaded; undefined when not loaded yet. */
  stubOf(stubId: string): StubRecord | undefined;
  /** Stops the container (its room is released once its agent has stopped it). */
  stop(c: Managed): void;
}

export class RoomOffers {
  constructor(private readonly d: RoomOffersDeps) {}

  /**
   * A warm container keeps its room while idle; when something else cannot
   * be placed (a runner of another stub, a sandbox, a pod: no room in the
   * fleet, or the workspace at a limit), the planner may pick it to give
   * its room up. Offered: running containers not busy, of stubs with no
   * tasks at all, above their deployment's baseline (the longest idle of
   * each stub first).
   */
  idle(): IdleCandidate[] {
    const { activity } = this.d.o;
    const byStub = new Map<string, IdleCandidate[]>();
    // Not gang members: the planner counts one container's room freed, and stopping one ends its whole gang.
    for (const c of this.d.containers.live((c) => c.state === "running" && !c.gang)) {
      const d = activity.demandOf(c.stubId);
      const a = activity.containerActivity(c.id);
      if (a?.busy || d?.pending || d?.running) continue;
      const list = byStub.get(c.stubId) ?? [];
      list.push({ id: c.id, idleSince: Math.max(a?.lastActiveAt ?? 0, c.since) });
      byStub.set(c.stubId, list);
    }
    const out: IdleCandidate[] = [];
    for (const [stubId, idle] of byStub) {
      const dep = this.d.o.deployments?.of(stubId);
      const baseline = dep?.active ? dep.minContainers : 0;
      const spare = this.d.containers.live((c) => c.stubId === stubId).length - baseline;
      out.push(...idle.sort((x, y) => x.idleSince - y.idleSince).slice(0, Math.max(0, spare)));
    }
    return out;
  }

  /**
   * Running containers of `preemptible` stubs, at their stub's priority, for
   * the planner to weigh when a higher-priority request finds no room. A
   * stub not loaded yet offers none (it is loaded on the next reconcile).
   */
  preemptible(): PreemptCandidate[] {
    const out: PreemptCandidate[] = [];
    // Not gang members: preempting one requeues its task and ends its whole gang, room the planner did not count.
    for (const c of this.d.containers.live((c) => c.state === "running" && !c.gang)) {
      const stub = this.d.stubOf(c.stubId);
      if (!stub?.extra.preemptible) continue;
      out.push({ id: c.id, priority: stub.extra.priority ?? 0, startedAt: c.since });
    }
    return out;
  }

  /** The planner preempts these: their tasks go back to the queue, then SIGTERM and the stop grace. */
  preempt(ids: string[], reason: string): void {
    for (const id of ids) {
      const c = this.d.containers.get(id);
      if (!c || c.state === "stopping") continue;
      const requeued = this.d.o.activity.requeuePreempted?.(c.id, `the container was ${reason}`) ?? 0;
      this.d.o.log.info(
        { containerId: c.id, stubId: c.stubId, agentId: c.agentId, reason, requeued },
        `preempting a container: ${reason}`,
      );
      this.d.stop(c);
    }
  }

  /** The planner picked these idle containers to make room. */
  stopToMakeRoom(ids: string[], reason: string): void {
    for (const id of ids) {
      const c = this.d.containers.get(id);
      if (!c || c.state === "stopping") continue;
      this.d.o.log.info(
        { containerId: c.id, stubId: c.stubId, agentId: c.agentId, reason },
        `stopping an idle warm container: ${reason}`,
      );
      this.d.stop(c);
    }
  }
}
