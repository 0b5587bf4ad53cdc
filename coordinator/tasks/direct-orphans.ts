// The survivors' check for direct tasks (endpoint, ASGI, realtime requests a
// coordinator proxies itself) whose coordinator died and stays dead
// (docs/reliability.md, "Several coordinators"). Every live coordinator runs
// it every CHECK_MS: it reads the open direct tasks older than GRACE_MS from
// the store, asks every coordinator which of them it serves
// (coordinator/tasks/direct-owners.ts), and ends FAILED
// (`CoordinatorDied`) those nobody claimed on two checks in a row. The
// caller's connection went with the dead coordinator, so nobody else would
// ever end them.
//
// Never a live coordinator's task: a check acts only when this coordinator
// heard its own question come back through NATS (a coordinator cut off from
// NATS hears nothing and ends nothing), a task must go unclaimed on two
// checks CHECK_MS apart (a lost answer is not enough), and the store ends a
// task only while it is open, with one history entry (TaskRepo.endIfOpen),
// so two survivors checking at once end it once.

import type { Logger } from "pino";
import { HTTP_SERVED_TYPES, type TaskError, type TaskFinishedEvent } from "../../shared/tasks.ts";
import type { TaskRecord, TaskRepo } from "./store.ts";
import { OrphanSweep } from "../streams/index.ts";
import type { DirectOwners } from "./direct-owners.ts";
import type { TaskEngine } from "./engine.ts";
import { liveFromRecord } from "./live-index.ts";

/** How often every coordinator checks. */
export const DIRECT_ORPHAN_CHECK_MS = 15_000;
/** A direct task younger than this is not checked (its coordinator may still be starting to answer). */
export const DIRECT_ORPHAN_GRACE_MS = 15_000;
/** The error a dead coordinator's direct task ends with. */
export const COORDINATOR_DIED_ERROR = "CoordinatorDied";

/** The stub types whose requests are direct tasks, as stored ("endpoint", "endpoint/deployment", ...). */
export const DIRECT_STUB_TYPES: string[] = [...HTTP_SERVED_TYPES].flatMap((k) => [
  k,
  `${k}/deployment`,
  `${k}/serve`,
]);

export interface DirectOrphanDeps {
  tasks: TaskRepo;
  engine: TaskEngine;
  owners: DirectOwners;
  /** Whether this coordinator serves the task itself (DirectTasks.owns). */
  owns: (taskId: string) => boolean;
  /** Tells the other coordinators of an end this one committed (their live copies and watchers follow). */
  relay: (ev: TaskFinishedEvent) => void;
  log: Logger;
  clock?: () => number;
  /** @default DIRECT_ORPHAN_CHECK_MS */
  intervalMs?: number;
  /** @default DIRECT_ORPHAN_GRACE_MS */
  graceMs?: number;
  /** How long a check waits for the coordinators' answers. @default DirectOwners' wait */
  answerWaitMs?: number;
}

export class DirectOrphanCheck {
  private readonly sweep: OrphanSweep<TaskRecord>;
  private readonly clock: () => number;

  constructor(private readonly d: DirectOrphanDeps) {
    this.clock = d.clock ?? Date.now;
    this.sweep = new OrphanSweep({
      listOpen: () => {
        const before = new Date(this.clock() - (d.graceMs ?? DIRECT_ORPHAN_GRACE_MS)).toISOString();
        return d.tasks.listOpenOfStubTypes(DIRECT_STUB_TYPES, before);
      },
      key: (r) => r.id,
      holds: d.owns,
      ask: (ids) => d.owners.ask(ids, ...(d.answerWaitMs !== undefined ? [d.answerWaitMs] : [])),
      end: (r) => this.end(r),
      log: d.log,
      messages: {
        skipped: "direct task check skipped: this coordinator did not hear its own question on NATS",
        endedField: "tasks",
        ended: "ended direct tasks of a coordinator that died",
        failed: "cannot check for direct tasks of a dead coordinator",
      },
    });
  }

  start(): void {
    this.sweep.start(this.d.intervalMs ?? DIRECT_ORPHAN_CHECK_MS);
  }

  stop(): void {
    this.sweep.stop();
  }

  /** One check; returns how many tasks it ended. */
  check(): Promise<number> {
    return this.sweep.check();
  }

  private async end(r: TaskRecord): Promise<boolean> {
    const at = this.clock();
    const error: TaskError = {
      type: COORDINATOR_DIED_ERROR,
      message: "the coordinator serving this request died; the request's connection went with it",
      traceback: "",
    };
    const reason = "coordinator_died";
    const won = await this.d.tasks.endIfOpen(
      {
        taskId: r.id,
        status: "FAILED",
        attempt: r.attempt,
        containerId: r.containerId,
        reason,
        at: new Date(at).toISOString(),
      },
      error,
    );
    if (!won) return false;
    this.d.engine.endCommitted(this.d.engine.index.get(r.id) ?? liveFromRecord(r), "FAILED", { error, at });
    this.d.relay({
      type: "finished",
      taskId: r.id,
      stubId: r.stubId,
      workspaceId: r.workspaceId,
      agentId: r.agentId ?? "",
      containerId: r.containerId ?? "",
      attempt: r.attempt,
      at,
      status: "FAILED",
      error,
      reason,
    });
    return true;
  }
}
