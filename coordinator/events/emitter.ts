// What the task engine and the deployment service call to announce a change:
// the event is built from what the caller has in hand, the workspace's
// external id (for the CloudEvent `source`) comes from a cache, and nothing
// is awaited by the caller. A workspace seen for the first time is looked up
// once; its events wait in order meanwhile.

import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { EventSink, EventType } from "./types.ts";
import type { TaskStatus } from "../../shared/tasks.ts";
import type { Workspace } from "../store/index.ts";
import type { TaskStatusListener } from "../tasks/index.ts";
import type { LiveTask } from "../tasks/index.ts";

/** Announces one change of a workspace's object. Never throws, never blocks. */
export type EmitEvent = (
  workspaceId: string,
  type: EventType,
  subject: string,
  data: Record<string, unknown>,
) => void;

interface Queued {
  type: EventType;
  subject: string;
  data: Record<string, unknown>;
  time: string;
}

export class WorkspaceEvents {
  private readonly externalIds = new Map<string, string>();
  private readonly waiting = new Map<string, Queued[]>();

  constructor(
    private readonly sink: EventSink,
    private readonly workspaces: { get(id: string): Promise<Workspace | undefined> },
    private readonly log: Logger,
  ) {}

  readonly emit: EmitEvent = (workspaceId, type, subject, data) => {
    const time = new Date().toISOString();
    const ext = this.externalIds.get(workspaceId);
    if (ext !== undefined) {
      this.sink.publish({ type, workspaceId, workspaceExternalId: ext, subject, time, data });
      return;
    }
    const queue = this.waiting.get(workspaceId);
    if (queue) {
      queue.push({ type, subject, data, time });
      return;
    }
    this.waiting.set(workspaceId, [{ type, subject, data, time }]);
    void this.lookUp(workspaceId);
  };

  private async lookUp(workspaceId: string): Promise<void> {
    let ext: string | undefined;
    try {
      ext = (await this.workspaces.get(workspaceId))?.externalId;
    } catch (e) {
      this.log.warn({ workspaceId, err: describeError(e) }, "events: cannot look the workspace up");
    }
    const queue = this.waiting.get(workspaceId) ?? [];
    this.waiting.delete(workspaceId);
    if (ext === undefined) {
      this.log.warn({ workspaceId, dropped: queue.length }, "events: unknown workspace; events dropped");
      return;
    }
    this.externalIds.set(workspaceId, ext);
    for (const q of queue) this.sink.publish({ ...q, workspaceId, workspaceExternalId: ext });
  }
}

const TASK_EVENT: Partial<Record<TaskStatus, EventType>> = {
  RUNNING: "task.running",
  RETRY: "task.retry",
  COMPLETE: "task.complete",
  FAILED: "task.failed",
  TIMEOUT: "task.timeout",
  CANCELLED: "task.cancelled",
  EXPIRED: "task.expired",
};

const TERMINAL: ReadonlySet<TaskStatus> = new Set(["COMPLETE", "FAILED", "TIMEOUT", "CANCELLED", "EXPIRED"]);

/** The task engine's status listener that emits task.* events (TaskServiceDeps.onTaskStatus). */
export function taskEvents(emit: EmitEvent): TaskStatusListener {
  return (t: LiveTask, from: TaskStatus | null, to: TaskStatus) => {
    const type = from === null ? "task.created" : TASK_EVENT[to];
    if (!type) return;
    const ended = TERMINAL.has(to);
    emit(t.workspaceId, type, t.id, {
      task_id: t.id,
      stub_id: t.stubId,
      status: to,
      attempt: t.attempt,
      container_id: t.containerId,
      created_at: t.createdAt,
      started_at: t.startedAt,
      ended_at: ended ? (t.endedAt ?? t.updatedAt) : null,
      ...(t.error && (ended || to === "RETRY") ? { error: t.error } : {}),
    });
  };
}
