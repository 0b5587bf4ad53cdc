// The reconciler for tasks whose agent is gone (docs/reliability.md "Stuck
// work"): a task RUNNING on an agent that has been lost (or has left) for
// longer than a bound is moved to RETRY with the reason `agent_lost`. Its
// queue message was never acknowledged, so JetStream redelivers it (after
// the ack wait) to whichever runner asks next; until then the task's status
// no longer claims a run that is not happening.

import type { Logger } from "pino";
import type { TaskEngine } from "./engine.ts";
import type { LiveTask } from "./live-index.ts";

/** What the reconciler needs of the fleet (FleetView.get). */
export interface AgentStates {
  get(agentId: string): { state: "ready" | "lost" | "left"; lastSeen: number } | undefined;
}

/**
 * Longer than JetStream's ack wait (30 s, docs/tasks.md): by then the
 * message is free for redelivery, so RETRY is what happens next.
 */
export const LOST_TASK_AFTER_MS = 60_000;

export interface LostTask {
  task: LiveTask;
  agentId: string;
  /** ms since epoch: the agent's last heartbeat. */
  lastSeen: number;
  state: "lost" | "left";
}

/**
 * The RUNNING tasks whose agent is lost or left and was last heard from
 * more than `afterMs` ago, among those with a queue message. An agent this coordinator has never heard of is
 * not judged (it may be one another coordinator knows; its heartbeats reach
 * every coordinator within an interval).
 */
export function tasksOfLostAgents(
  tasks: Iterable<LiveTask>,
  agents: AgentStates,
  now: number,
  afterMs: number,
): LostTask[] {
  const out: LostTask[] = [];
  for (const t of tasks) {
    // A task without a queue message (a direct endpoint request) would never be redelivered: not ours.
    if (t.status !== "RUNNING" || !t.agentId || t.streamSeq === null) continue;
    const a = agents.get(t.agentId);
    if (!a || a.state === "ready" || now - a.lastSeen <= afterMs) continue;
    out.push({ task: t, agentId: t.agentId, lastSeen: a.lastSeen, state: a.state });
  }
  return out;
}

/** RUNNING tasks whose agent is gone past `afterMs`: RETRY (`agent_lost`), redelivered by JetStream. */
export function retryTasksOfLostAgents(
  engine: TaskEngine,
  agents: AgentStates,
  now: number,
  afterMs: number,
  log: Logger,
): void {
  for (const lost of tasksOfLostAgents(engine.index.values(), agents, now, afterMs)) {
    const silent = Math.round((now - lost.lastSeen) / 1000);
    const message = `agent ${lost.agentId} is ${lost.state} (last heard ${silent} s ago); the task will run again when a runner takes it`;
    const error = { type: "AgentLost", message, traceback: "" };
    if (engine.presumeLost(lost.task, { error, reason: "agent_lost", at: now }))
      log.warn({ taskId: lost.task.id, agentId: lost.agentId }, `task moved to RETRY: ${message}`);
  }
}
