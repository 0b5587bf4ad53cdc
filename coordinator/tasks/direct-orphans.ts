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
import { describeError } from "../../shared/errors.ts";
import { HTTP_SERVED_TYPES, type TaskError, type TaskFinishedEvent } from "../../shared/tasks.ts";
import type { TaskRecord, TaskRepo } from "../store/tasks.ts";
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
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** Tasks unclaimed at the last check: ended if the next one finds them unclaimed again. */
  private suspects = new Set<string>();
  private readonly clock: () => number;

  constructor(private readonly d: DirectOrphanDeps) {
    this.clock = d.clock ?? Date.now;
  }

  start(): void {
    this.timer = setInterval(() => void this.check(), this.d.intervalMs ?? DIRECT_ORPHAN_CHECK_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One check; returns how many tasks it ended. */
  async check(): Promise<number> {
    if (this.running) return 0;
    this.running = true;
    try {
      const before = new Date(this.clock() - (this.d.graceMs ?? DIRECT_ORPHAN_GRACE_MS)).toISOString();
      const open = (await this.d.tasks.listOpenOfStubTypes(DIRECT_STUB_TYPES, before)).filter(
        (r) => !this.d.owns(r.id),
      );
      if (open.length === 0) {
        this.suspects.clear();
        return 0;
      }
      const { claimed: served, heardSelf } = await this.d.owners.ask(
        open.map((r) => r.id),
        ...(this.d.answerWaitMs !== undefined ? [this.d.answerWaitMs] : []),
      );
      if (!heardSelf) {
        // Silence from a connection that did not carry the question proves nothing: start over.
        this.suspects.clear();
        this.d.log.warn("direct task check skipped: this coordinator did not hear its own question on NATS");
        return 0;
      }
      const next = new Set<string>();
      let ended = 0;
      for (const r of open) {
        if (served.has(r.id) || this.d.owns(r.id)) continue;
        if (!this.suspects.has(r.id)) next.add(r.id);
        else if (await this.end(r)) ended++;
      }
      this.suspects = next;
      if (ended > 0) this.d.log.warn({ tasks: ended }, "ended direct tasks of a coordinator that died");
      return ended;
    } catch (e) {
      this.d.log.warn({ err: describeError(e) }, "cannot check for direct tasks of a dead coordinator");
      return 0;
    } finally {
      this.running = false;
    }
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
