// Why a task waits (docs/tasks.md "Why a task waits"): its place among the
// stub's waiting tasks, in the order its queue hands them out, and what the
// container manager last found holds the stub's containers back.

import type { ContainerCounts, StubWait } from "./activity.ts";
import type { LiveTask } from "./live-index.ts";

export interface TaskWaiting {
  /**
   * queued: containers exist and take the stub's tasks in order; the rest
   * are the manager's StubWait kinds (no container for it yet, and why).
   */
  kind: "queued" | StubWait["kind"];
  message: string;
  /** 1-based place among the stub's waiting tasks (1: next to be taken). */
  position: number;
  /** Waiting tasks of the stub ahead of this one. */
  ahead: number;
  /** Tasks of the stub waiting in all. */
  waiting: number;
  /** Containers of the stub running or starting now. */
  containers: number;
  /** The workspace limit that refused a container (workspace_limit only). */
  limit?: string;
  /** ISO 8601: since when the stub waits for this reason (absent for queued). */
  since?: string;
}

type Queued = Pick<LiveTask, "id" | "stubId" | "status" | "streamSeq" | "createdAt">;

const isWaiting = (t: Queued) => t.status === "PENDING" || t.status === "RETRY";

/**
 * The queue hands a stub's messages out in stream order: a task's stream
 * sequence orders it (one not yet stored goes last, by creation).
 */
function queueOrder(a: Queued, b: Queued): number {
  const sa = a.streamSeq ?? Number.POSITIVE_INFINITY;
  const sb = b.streamSeq ?? Number.POSITIVE_INFINITY;
  if (sa !== sb) return sa < sb ? -1 : 1;
  return a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id);
}

/** Why `t` waits; undefined once it is not PENDING or RETRY. `stubTasks` are the live tasks (any stub). */
export function taskWaiting(
  t: Queued,
  stubTasks: Iterable<Queued>,
  counts: ContainerCounts | undefined,
): TaskWaiting | undefined {
  if (!isWaiting(t)) return undefined;
  let ahead = 0;
  let waiting = 0;
  for (const o of stubTasks) {
    if (o.stubId !== t.stubId || !isWaiting(o)) continue;
    waiting++;
    if (o.id !== t.id && queueOrder(o, t) < 0) ahead++;
  }
  if (waiting === 0) waiting = 1; // t itself, read from the store and not in the index
  const containers = counts?.activeContainers(t.stubId) ?? 0;
  const place = { position: ahead + 1, ahead, waiting, containers };
  const wait = counts?.waitState?.(t.stubId);
  if (wait) {
    return {
      kind: wait.kind,
      message:
        containers > 0 && wait.kind !== "container_starting"
          ? `${wait.message}; ${containers} container(s) of the stub take its tasks meanwhile`
          : wait.message,
      ...place,
      ...(wait.limit ? { limit: wait.limit } : {}),
      since: new Date(wait.since).toISOString(),
    };
  }
  const message =
    containers > 0
      ? `queued: ${ahead} task(s) of the stub ahead of it, ${containers} container(s) taking them`
      : `queued: ${ahead} task(s) of the stub ahead of it; no container yet (the container manager has not placed one)`;
  return { kind: "queued", message, ...place };
}
