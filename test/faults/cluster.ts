// What the fault suites on `berth up` clusters share: the coordinator's store
// read directly (each task's final-status history entries), and the agent's
// own view (its containers, whether it reports ready).

import { join } from "node:path";
import { readFileSync } from "node:fs";
import Database from "better-sqlite3";
import type { BerthUp } from "../helpers/berth-up.ts";
import { runCli } from "../helpers/cluster.ts";
import type { SeenTask } from "./summary.ts";

export interface TaskRow {
  id: string;
  status: string;
  attempt: number;
  container_id: string | null;
  error_json: string | null;
  finals: number;
  /** The reason of its last final-status history entry (oom_killed, disk_full, ...). */
  final_reason: string | null;
}

/** The stub's tasks as the coordinator's store holds them, with how many final-status history entries each has. */
export function tasksOf(up: BerthUp, stubName: string): TaskRow[] {
  const db = new Database(join(up.dataDir, "coordinator", "berth.db"), { readonly: true });
  try {
    return db
      .prepare(
        `SELECT t.id, t.status, t.attempt, t.container_id, t.error_json,
           (SELECT COUNT(*) FROM task_events e WHERE e.task_id = t.id
              AND e.status IN ('COMPLETE', 'FAILED', 'TIMEOUT', 'EXPIRED', 'CANCELLED')) AS finals,
           (SELECT e.reason FROM task_events e WHERE e.task_id = t.id
              AND e.status IN ('COMPLETE', 'FAILED', 'TIMEOUT', 'EXPIRED', 'CANCELLED')
              ORDER BY e.at DESC LIMIT 1) AS final_reason
         FROM tasks t JOIN stubs s ON s.id = t.stub_id WHERE s.name = ? ORDER BY t.created_at`,
      )
      .all(stubName) as TaskRow[];
  } finally {
    db.close();
  }
}

export const seen = (rows: TaskRow[]): SeenTask[] =>
  rows.map((r) => ({ id: r.id, status: r.status, attempts: r.attempt, finalEntries: r.finals }));

export interface Container {
  id: string;
  state: string;
  reason?: string;
}

export async function containers(up: BerthUp): Promise<Container[] | undefined> {
  const sock = join(up.dataDir, "agent", "agent.sock");
  const r = await runCli(["agent", "ps", "--all", "--json", "--socket", sock], up.env);
  return r.code === 0 ? (JSON.parse(r.stdout) as Container[]) : undefined;
}

/** The agent id in an agent data dir (berth up's: DATA/agent). */
export const agentIdOf = (agentDir: string): string =>
  (JSON.parse(readFileSync(join(agentDir, "identity.json"), "utf8")) as { agentId: string }).agentId;

/** Is the agent (berth up's unless named) reported ready to the coordinator? */
export async function agentReady(
  up: BerthUp,
  agentId = agentIdOf(join(up.dataDir, "agent")),
): Promise<boolean> {
  const r = await up.api("/api/v1/agents");
  if (!r.ok) return false;
  const { agents } = (await r.json()) as { agents: { id: string; state: string }[] };
  return agents.some((a) => a.id === agentId && a.state === "ready");
}
