// Direct tasks: requests the coordinator proxies itself to a container's HTTP
// server (endpoint, asgi, realtime; docs/deployments.md). Each is a task like
// a queued one (row, history, live index, demand, watchers, callbacks) but
// never has a JetStream message: the coordinator decides every transition,
// through the same engine the agents' events go through. A direct task's row
// is written when it ends or once it has been open for FOLD_MS, whichever
// comes first (coordinator/tasks/unwritten.ts): a short request costs one
// batched write, not three.

import type { Logger } from "pino";
import { newId } from "../../shared/ids.ts";
import { baseStubType, HTTP_SERVED_TYPES, type TaskError } from "../../shared/tasks.ts";
import type { StubRecord } from "./stub-store.ts";
import type { TaskEngine } from "./engine.ts";
import { type LiveTask, pendingTask } from "./live-index.ts";
import { policyExpiresAt } from "./policy.ts";
import { isTerminal } from "./transitions.ts";

export type DirectOutcomeStatus = "COMPLETE" | "FAILED" | "TIMEOUT" | "EXPIRED" | "CANCELLED";

export interface DirectOutcome {
  status: DirectOutcomeStatus;
  /** The response body when it is JSON (callbacks' `data`, the REST API). */
  resultJson?: string | null;
  error?: TaskError | null;
  /** Why, in the task's history (expired, client_disconnected, ...). */
  reason?: string;
}

export interface DirectTaskInfo {
  id: string;
  /** ms since epoch; null = waits for a slot as long as it takes. */
  expiresAt: number | null;
  createdAt: string;
}

/** What a direct task carries besides its stub. */
export interface DirectTaskOptions {
  callbackUrl?: string | null;
  tokenId?: string | null;
}

/** Whether requests to stubs of this type are direct tasks ("endpoint/deployment" → endpoint). */
export const isDirectStubType = (type: string): boolean => HTTP_SERVED_TYPES.has(baseStubType(type));

export class DirectTasks {
  private readonly own = new Set<string>();

  constructor(
    private readonly engine: TaskEngine,
    private readonly log: Logger,
    private readonly clock: () => number,
  ) {}

  /**
   * A new request's task id and times, not yet recorded: a request that finds
   * a free container goes out first and is recorded (record()) while the
   * container works on it (coordinator/endpoints/dispatch.ts).
   */
  prepare(stub: StubRecord): DirectTaskInfo {
    const now = this.clock();
    return {
      id: newId("task"),
      expiresAt: policyExpiresAt(stub.config, now),
      createdAt: new Date(now).toISOString(),
    };
  }

  /**
   * Records the PENDING task prepare() made; it counts in demand() (the
   * container manager scales from it) until started or ended. Its row is
   * written later (see above); until then the live index answers for it.
   */
  record(stub: StubRecord, info: DirectTaskInfo, o: DirectTaskOptions = {}): void {
    const t = pendingTask({
      id: info.id,
      workspaceId: stub.workspaceId,
      stubId: stub.id,
      headless: false,
      callbackUrl: o.callbackUrl || null,
      expiresAt: info.expiresAt,
      createdAt: info.createdAt,
      tokenId: o.tokenId ?? null,
    });
    this.own.add(t.id);
    this.engine.addUnwritten(t);
  }

  /** Whether the task is a direct task this coordinator has open. */
  owns(taskId: string): boolean {
    return this.own.has(taskId);
  }

  /**
   * The request went to a container: RUNNING there (the container is busy, so
   * it is never scaled down under it). False when the task has already ended
   * (cancelled through the task API, expired).
   */
  started(taskId: string, containerId: string, agentId: string): boolean {
    const t = this.engine.index.get(taskId);
    if (!t || (t.status !== "PENDING" && t.status !== "RETRY")) return false;
    return this.engine.applyEvent(
      t,
      { type: "started", ...this.eventBase(t, containerId, agentId), attempt: t.attempt + 1 },
      noop,
    );
  }

  /**
   * The container could not be reached before the request was sent: the task
   * waits again (RETRY counts as waiting in demand) for another slot.
   */
  retry(taskId: string, error: TaskError): boolean {
    const t = this.engine.index.get(taskId);
    if (t?.status !== "RUNNING") return false;
    return this.engine.applyEvent(
      t,
      {
        type: "retry",
        ...this.eventBase(t, t.containerId ?? "", t.agentId ?? ""),
        reason: "container_unreachable",
        error,
      },
      noop,
    );
  }

  /** Ends the task; false when it had already ended (the first outcome stands). */
  finished(taskId: string, o: DirectOutcome): boolean {
    this.own.delete(taskId);
    const t = this.engine.index.get(taskId);
    if (!t || isTerminal(t.status)) return false;
    if (t.status !== "RUNNING") {
      // Never reached a container: the coordinator ends it, as cancel and expiry do.
      return this.engine.end(t, o.status, {
        ...(o.error ? { error: o.error } : {}),
        reason: o.reason ?? o.status.toLowerCase(),
        at: this.clock(),
      });
    }
    return this.engine.applyEvent(
      t,
      {
        type: "finished",
        ...this.eventBase(t, t.containerId ?? "", t.agentId ?? ""),
        status: o.status,
        ...(o.resultJson ? { resultJson: o.resultJson } : {}),
        ...(o.error ? { error: o.error } : {}),
        ...(o.reason ? { reason: o.reason } : {}),
      },
      noop,
    );
  }

  /**
   * Direct tasks left unfinished by an earlier run of the coordinator: their
   * callers' connections died with it, so nobody will ever end them (and they
   * would hold containers up as demand). Ends them FAILED. Only written rows
   * are found here: a task whose row was never written (it was open for less
   * than FOLD_MS when the process died without stopping) left no trace, so
   * no API ever shows it after the restart. A coordinator that stops writes
   * every unwritten row first (TaskEngine.stop). With several coordinators,
   * a task another live coordinator still serves is its own (`servedElsewhere`,
   * coordinator/tasks/direct-owners.ts) and is left alone.
   */
  async failOrphans(
    live: Iterable<LiveTask>,
    stubType: (stubId: string) => Promise<string | undefined>,
    servedElsewhere: (ids: string[]) => Promise<Set<string>> = async () => new Set(),
  ) {
    let n = 0;
    const open: LiveTask[] = [];
    for (const t of [...live]) {
      if (this.own.has(t.id) || isTerminal(t.status)) continue;
      const type = await stubType(t.stubId);
      if (type && isDirectStubType(type)) open.push(t);
    }
    const served = await servedElsewhere(open.map((t) => t.id));
    for (const t of open) {
      if (served.has(t.id)) continue;
      const error: TaskError = {
        type: "CoordinatorRestarted",
        message: "the coordinator restarted while the request was open",
        traceback: "",
      };
      if (this.engine.end(t, "FAILED", { error, reason: "coordinator_restarted", at: this.clock() })) n++;
    }
    if (n > 0) this.log.warn({ tasks: n }, "ended direct tasks left open by an earlier coordinator");
    return n;
  }

  private eventBase(t: LiveTask, containerId: string, agentId: string) {
    return {
      taskId: t.id,
      stubId: t.stubId,
      workspaceId: t.workspaceId,
      agentId,
      containerId,
      attempt: t.attempt,
      at: this.clock(),
    };
  }
}

const noop = () => {};
