// Why a stub's tasks have no container for them now, read from the
// manager's recorded outcomes. Its own module because it is one question the
// task status routes ask (docs/tasks.md, "Why a task waits") with its
// own precedence, separate from the reconcile loop in manager.ts that
// produces those outcomes.

import type { StubWait } from "../tasks/index.ts";
import type { ContainerTable, Managed } from "./container-table.ts";
import type { ContainerStarter } from "./starter.ts";

/**
 * A start failure backing off, else the planner's last refusal (no room, no
 * agent, a workspace limit), else a placed container still starting.
 * Undefined when none holds the tasks back (they are queued behind others
 * for the stub's running containers).
 */
export function stubWaitState(
  starter: ContainerStarter,
  containers: ContainerTable,
  stubId: string,
  now: number,
): StubWait | undefined {
  if (starter.failures.blocked(stubId, now)) {
    const last = starter.failures.lastError(stubId) ?? "a container start failed";
    const n = starter.failures.attempts(stubId);
    return {
      kind: "start_backoff",
      message: `waiting to retry a container start (${n} failed round${n === 1 ? "" : "s"}): ${last}`,
      since: starter.failures.lastFailedAt(stubId) ?? now,
    };
  }
  const refused = starter.lastRefusal(stubId);
  if (refused) return { ...refused };
  const starting = containers.live((c) => c.stubId === stubId && c.state === "starting");
  const first = starting.reduce<Managed | undefined>((m, c) => (m && m.since <= c.since ? m : c), undefined);
  if (!first) return undefined;
  const more = starting.length > 1 ? ` (and ${starting.length - 1} more)` : "";
  return {
    kind: "container_starting",
    message: `container ${first.id} is starting on agent ${first.agentId}${more}`,
    since: first.since,
  };
}
