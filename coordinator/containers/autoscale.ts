// Scale decisions, pure (docs/deployments.md "Autoscaling"): how many
// containers a stub should have for its demand, and which of its containers
// may stop now. The manager feeds them what it sees and acts on the answer.

import { HTTP_SERVED_TYPES, baseStubType } from "../../shared/tasks.ts";
import { gangSize } from "./gangs.ts";
import { concurrentRequestsOf, workersOf } from "./runner-request.ts";
import type { StubRecord } from "./types.ts";

export interface Demand {
  /** Tasks waiting for a container (PENDING/RETRY). */
  pending: number;
  running: number;
}

type ScaledStub = Pick<StubRecord, "type" | "config" | "extra">;

/**
 * Whether the stub's `config.autoscaler` counts. A plain function's stub
 * (`.remote()`/`.map()`) is sent with `{queue_depth, max_containers: 1,
 * tasks_per_container: 1}` by the SDK, yet `.map()` fans out up to the
 * workspace limit (docs/tasks.md), so its autoscaler is not applied; every
 * deployed kind (`{kind}/deployment`, `{kind}/serve`) applies it.
 */
export function isAutoscaled(stub: Pick<StubRecord, "type">): boolean {
  return stub.type !== "function";
}

/** Whether the coordinator proxies HTTP to the stub's containers (endpoint, asgi, realtime). */
export function isDirectServed(stub: Pick<StubRecord, "type">): boolean {
  return HTTP_SERVED_TYPES.has(baseStubType(stub.type));
}

/** Tasks one container runs at once: direct-served, workers × concurrent_requests; queued, workers. */
export function slotsPerContainer(stub: ScaledStub): number {
  return isDirectServed(stub) ? workersOf(stub) * concurrentRequestsOf(stub) : workersOf(stub);
}

/** Tasks that make one container's worth of demand; a gang (a "container" of several hosts) runs one at a time. */
export function tasksPerContainer(stub: ScaledStub): number {
  if (gangSize(stub) > 1) return 1;
  if (!isAutoscaled(stub)) return workersOf(stub);
  const t = stub.config.autoscaler?.tasks_per_container;
  return Number.isInteger(t) && t > 0 ? t : slotsPerContainer(stub);
}

/**
 * Containers the stub should run for its demand. `baseline`: min_containers
 * of the latest active version of its deployment, else 0. With the
 * queue_depth autoscaler and max_containers > 0 the result lies in
 * [baseline, max_containers] (the baseline clamped to the max too); the
 * workspace limit applies on top, where containers start.
 */
export function desiredContainers(stub: ScaledStub, demand: Demand, baseline: number): number {
  const tasks = Math.max(0, demand.pending) + Math.max(0, demand.running);
  const fromDemand = Math.ceil(tasks / tasksPerContainer(stub));
  const floor = Number.isFinite(baseline) && baseline > 0 ? Math.floor(baseline) : 0;
  const a = stub.config.autoscaler;
  if (isAutoscaled(stub) && a?.type === "queue_depth" && a.max_containers > 0) {
    const max = a.max_containers;
    return Math.min(Math.max(fromDemand, Math.min(floor, max)), max);
  }
  return Math.max(fromDemand, floor);
}

/** One running container of a stub as scale-down sees it. */
export interface StopCandidate {
  id: string;
  busy: boolean;
  /** ms since epoch: its last task's start or end, or when it started running. */
  idleSince: number;
  /** Started with an older config_version of the stub than the current one. */
  outdated: boolean;
}

export type StopReason = "deployment stopped" | "config changed" | "idle past keep_warm_seconds";

export interface StopPlanInput {
  candidates: readonly StopCandidate[];
  /** Containers of the current config the stub has, starting ones included. */
  current: number;
  /** Containers to keep: max(desired, baseline). */
  keep: number;
  /** keep_warm_seconds × 1000; negative: never stop for idleness. */
  keepWarmMs: number;
  now: number;
  /** The stub's deployment is stopped: every idle container goes now. */
  draining: boolean;
}

/**
 * Which containers stop now. Never a busy one. Draining: all idle ones.
 * Otherwise idle containers of an older config go at once (the desired count
 * brings new ones), and of the rest those above `keep` go once idle for
 * keep_warm, the longest idle first.
 */
export function containersToStop(p: StopPlanInput): { id: string; reason: StopReason }[] {
  const idle = p.candidates.filter((c) => !c.busy);
  if (p.draining) return idle.map((c) => ({ id: c.id, reason: "deployment stopped" as const }));
  const out: { id: string; reason: StopReason }[] = idle
    .filter((c) => c.outdated)
    .map((c) => ({ id: c.id, reason: "config changed" as const }));
  if (!(p.keepWarmMs >= 0)) return out;
  let excess = p.current - p.keep;
  const cold = idle
    .filter((c) => !c.outdated && p.now - c.idleSince >= p.keepWarmMs)
    .sort((a, b) => a.idleSince - b.idleSince);
  for (const c of cold) {
    if (excess-- <= 0) break;
    out.push({ id: c.id, reason: "idle past keep_warm_seconds" });
  }
  return out;
}
