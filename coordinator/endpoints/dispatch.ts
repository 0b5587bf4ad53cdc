// Requests to direct-served deployments (endpoint, asgi, realtime): each is
// a task the coordinator records itself, waits for a container slot and is
// proxied through the agent tunnel (docs/deployments.md, Invocation).

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Readable } from "node:stream";
import { BerthError, describeError, isErrorCode } from "../../shared/errors.ts";
import type { TaskError } from "../../shared/tasks.ts";
import { type ForwardResult, forward, readBody, upstreamHeaders } from "../containers/index.ts";
import {
  HttpRefusal,
  MaskedError,
  maskedDetailMessage,
  newErrorId,
  publicError,
  type PublicError,
  sendError,
  writeJsonAnswer,
} from "../http/index.ts";
import { checkBody, describeBodyMismatch } from "./handler-params.ts";
import type { StubRecord } from "../tasks/index.ts";
import type { DirectOutcome, DirectTaskInfo, DirectTaskOptions } from "../tasks/index.ts";
import { PodRouter } from "./pods.ts";
import { EndpointAuth, parseEndpointPath, type Resolved, resolveEndpoint } from "./resolve.ts";
import { type Slot, SlotWaitEnded, EndpointSlots } from "./slots.ts";
import { ENDPOINT_BODY_LIMIT, type EndpointDeps, RUNNER_HTTP_PORT } from "./types.ts";

/** Times one request goes back to the head of the queue because its container could not be reached. */
export const MAX_UNREACHABLE_TRIES = 3;

/** How one try on a slot went (the forwarder's result, coordinator/containers/forward.ts). */
export type TryResult = ForwardResult;

/** Why a request's task ends without a container answer. */
export type AbortReason = "caller" | "timeout" | "ended";

export interface TaskRun {
  stub: StubRecord;
  task: DirectTaskInfo;
  controller: AbortController;
  /** Set before `controller` aborts. */
  why: AbortReason | undefined;
  /** The error the task ended with when it was ended elsewhere ("ended"), e.g. failed as unplaceable. */
  endedWith?: TaskError | null;
  /** A container to take when it has a free slot (the /v1 gateway's sessions). */
  prefer?: string;
  /** What the task is recorded with; `recorded` once it is (dispatch() decides when). */
  options: DirectTaskOptions;
  recorded: boolean;
}

const taskError = (type: string, message: string): TaskError => ({ type, message, traceback: "" });
const UNRECORDED = "the request's task could not be recorded";

export class EndpointDispatcher {
  readonly slots: EndpointSlots;
  readonly auth: EndpointAuth;
  readonly clock: () => number;
  /** Deployed pods: a plain proxy, no tasks. */
  readonly pods: PodRouter;

  constructor(readonly deps: EndpointDeps) {
    this.clock = deps.clock ?? Date.now;
    this.slots = new EndpointSlots(deps.containers, this.clock);
    this.auth = new EndpointAuth(deps.tokens, this.clock);
    this.pods = new PodRouter(deps, deps.podStartWaitMs);
  }

  close(): void {
    this.slots.close();
  }

  /** Answers a request that got no task (or none yet) with `e`, through the public error edge. */
  refuse(res: ServerResponse, e: unknown): void {
    if (res.headersSent || res.destroyed) return;
    sendError(res, e, { log: this.deps.log, what: "endpoint request failed" });
  }

  /** The deployment a request is for, or the refusal to answer with. */
  async resolve(
    url: string,
    authorization: string | undefined,
  ): Promise<{ r: Resolved; rest: string; query: string; prefix: string }> {
    const path = parseEndpointPath(url);
    if (!path)
      throw new BerthError(
        "not_found",
        "no endpoint named: use /endpoint/{name} or /endpoint/id/{deployment_id}",
      );
    const r = await resolveEndpoint(path, authorization, this.auth, this.deps.deployments);
    this.deps.deployments.noteRequest(r.deployment.id);
    return { r, rest: path.rest, query: path.query, prefix: path.prefix };
  }

  /** Serves one plain HTTP request to /endpoint/...: writes the whole answer. */
  async serveHttp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let target: Awaited<ReturnType<EndpointDispatcher["resolve"]>>;
    let body: Buffer | Readable = req;
    let callbackUrl: string | null = null;
    try {
      target = await this.resolve(req.url ?? "", req.headers.authorization);
      const { r } = target;
      if (r.kind === "realtime") {
        throw new HttpRefusal(
          "invalid_request",
          "a realtime deployment takes websocket connections (Upgrade: websocket)",
          { status: 426, headers: { upgrade: "websocket" } },
        );
      }
      if (r.kind === "endpoint") {
        if (req.method !== "POST") {
          throw new HttpRefusal(
            "invalid_request",
            `an endpoint takes POST with a JSON object body, not ${req.method}`,
            { status: 405, headers: { allow: "POST" } },
          );
        }
        const raw = await readBody(req, ENDPOINT_BODY_LIMIT, BODY_LIMIT_HINT);
        const json = parseObject(raw);
        const params = r.stub.extra.handler_params;
        if (params) {
          const m = checkBody(params, json);
          if (m.unknown.length || m.missing.length) {
            throw new BerthError("invalid_request", describeBodyMismatch(m), {
              unknown: m.unknown,
              missing: m.missing,
            });
          }
        }
        callbackUrl = callbackOf(json);
        body = raw;
      }
    } catch (e) {
      return this.refuse(res, e);
    }
    if (target.r.kind === "pod") return this.pods.serveHttp(target, req, res);
    const { r, rest, query, prefix } = target;
    const run = await this.open(r.stub, callbackUrl, (e) => this.refuse(res, e), r.tokenId);
    if (!run) return;
    const headers = upstreamHeaders(req.headers, {
      dropAuthorization: r.tokenUsed,
      remoteAddress: req.socket.remoteAddress,
      prefix,
    });
    headers["x-task-id"] = run.task.id;
    if (callbackUrl) headers["x-callback-url"] = callbackUrl;
    if (Buffer.isBuffer(body)) {
      headers["content-length"] = String(body.length);
      headers["content-type"] ??= "application/json";
    }
    const path = r.kind === "asgi" ? `${rest}${query}` : "/";
    const onClose = () => {
      if (!res.writableFinished) this.abort(run, "caller");
    };
    res.on("close", onClose);
    try {
      await this.dispatch(
        run,
        (slot) =>
          forward({
            agent: this.deps.tunnels.httpAgent(slot.agentId, slot.containerId, RUNNER_HTTP_PORT),
            containerId: slot.containerId,
            port: RUNNER_HTTP_PORT,
            method: req.method ?? "GET",
            path,
            headers,
            body,
            res,
            taskId: run.task.id,
            signal: run.controller.signal,
            runnerErrors: "api",
            keepResult: r.kind === "endpoint" ? "always" : "json",
          }),
        (status, body, headers) => {
          if (res.headersSent) res.destroy();
          else writeJson(res, status, body, run.task.id, headers);
        },
      );
    } finally {
      res.off("close", onClose);
    }
  }

  /**
   * Admits a request (max_pending_tasks) and makes its task's id, which
   * dispatch() records; answers the caller itself (429) and returns
   * undefined when it cannot.
   */
  async open(
    stub: StubRecord,
    callbackUrl: string | null,
    say: (e: unknown) => void,
    tokenId: string | null = null,
  ): Promise<TaskRun | undefined> {
    if (!this.slots.admit(stub)) {
      say(
        new BerthError(
          "resource_exhausted",
          `too many requests waiting for '${stub.name}': ${stub.config.max_pending_tasks} (max_pending_tasks) already wait for a container; retry later`,
        ),
      );
      return undefined;
    }
    const task = this.deps.tasks.direct.prepare(stub);
    return {
      stub,
      task,
      controller: new AbortController(),
      why: undefined,
      options: { callbackUrl, tokenId },
      recorded: false,
    };
  }

  /**
   * Records the request's task (PENDING) unless it is already; false when
   * that failed (logged): the request is then refused, never left running
   * without its task.
   */
  private record(run: TaskRun): boolean {
    if (run.recorded) return true;
    run.recorded = true;
    try {
      this.deps.tasks.direct.record(run.stub, run.task, run.options);
      return true;
    } catch (e) {
      this.deps.log.error({ err: describeError(e), taskId: run.task.id }, "cannot record a request's task");
      run.endedWith = taskError("internal", UNRECORDED);
      return false;
    }
  }

  /** A request that went out before its task was recorded: recorded now and RUNNING on its slot, else aborted. */
  private startSent(run: TaskRun, slot: Slot): void {
    const started =
      this.record(run) && this.deps.tasks.direct.started(run.task.id, slot.containerId, slot.agentId);
    if (!started) this.abort(run, "ended");
  }

  abort(run: TaskRun, why: AbortReason): void {
    if (run.controller.signal.aborted) return;
    run.why = why;
    run.controller.abort();
  }

  /**
   * Waits for a slot, marks the task RUNNING there and runs `attempt` on it;
   * a container that cannot be reached sends the request back to the head of
   * the queue (RETRY). Ends the task; `answer` gives the caller an error when
   * the task ends without the container's answer.
   *
   * A request that finds a free slot at once goes out before its task is
   * recorded: recording it (the live index, its history, the workspace
   * events) and marking it RUNNING then happen in the same turn of the event
   * loop, after the request was written, while the container works on it.
   * A request that must wait is recorded first, so it counts in the demand
   * that starts containers.
   */
  async dispatch(run: TaskRun, attempt: (slot: Slot) => Promise<TryResult>, answer: Answer): Promise<void> {
    const { stub, task } = run;
    const direct = this.deps.tasks.direct;
    let ending = false;
    const unwatch = this.deps.tasks.watch([task.id], (u) => {
      if (u.type === "result" && !ending) {
        run.endedWith = u.error;
        this.abort(run, "ended");
      }
    });
    const finish = (o: DirectOutcome) => {
      ending = true;
      direct.finished(task.id, o);
    };
    let timer: NodeJS.Timeout | undefined;
    let unreachable = 0;
    const avoid = new Set<string>();
    try {
      for (;;) {
        const want = {
          expiresAt: task.expiresAt,
          signal: run.controller.signal,
          front: unreachable > 0,
          avoid,
          ...(run.prefer ? { prefer: run.prefer } : {}),
        };
        let slot = this.slots.take(stub, want);
        const early = slot !== undefined && !run.recorded;
        if (!slot) {
          if (!this.record(run)) {
            this.slots.unreserve(stub);
            this.answerError(answer, new BerthError("internal", UNRECORDED), task.id);
            return;
          }
          try {
            slot = await this.slots.acquire(stub, want);
          } catch (e) {
            if (e instanceof SlotWaitEnded && e.why === "expired") {
              const secs =
                task.expiresAt === null
                  ? 0
                  : Math.round((task.expiresAt - Date.parse(task.createdAt)) / 1000);
              const message = `no container took the request within ${secs} s (task_policy.expires)`;
              finish({ status: "EXPIRED", error: taskError("TaskExpired", message), reason: "expired" });
              this.answerError(answer, new BerthError("task_expired", message), task.id);
            } else {
              this.endAborted(run, finish, answer);
            }
            return;
          }
        }
        const taken = slot;
        if (!early && !direct.started(task.id, taken.containerId, taken.agentId)) {
          this.slots.release(stub.id, taken);
          this.endAborted(run, finish, answer);
          return;
        }
        const timeout = stub.config.task_policy.timeout;
        if (!timer && timeout > 0) timer = setTimeout(() => this.abort(run, "timeout"), timeout * 1000);
        let result: TryResult;
        let startLater: NodeJS.Immediate | undefined;
        try {
          const trying = attempt(taken);
          // Once the request is written (this turn's check phase), at the latest before its outcome.
          if (early)
            startLater = setImmediate(() => {
              startLater = undefined;
              this.startSent(run, taken);
            });
          result = await trying;
        } finally {
          if (startLater) {
            clearImmediate(startLater);
            this.startSent(run, taken);
          }
          this.slots.release(stub.id, taken);
        }
        if (result.kind === "done") return finish(result.outcome);
        if (result.kind === "aborted") return this.endAborted(run, finish, answer);
        // Answered first, then ended: the task's error is what the caller was told (masked).
        const fail = (e: BerthError, reason: string) => {
          const pe = this.answerError(answer, e, task.id, { "x-task-id": task.id });
          finish({ status: "FAILED", error: taskError("EndpointProxyError", pe.error.message), reason });
        };
        if (result.kind === "failed") return fail(result.error, result.reason);
        this.deps.tunnels.forget(slot.containerId);
        avoid.add(slot.containerId);
        if (++unreachable >= MAX_UNREACHABLE_TRIES) {
          const detail = `could not reach a container of '${stub.name}' (${slot.containerId} last): ${result.error}`;
          return fail(new MaskedError("bad_gateway", detail), "unreachable");
        }
        // The task's history shows the retry; the log line (same id) how the container was missed.
        const errorId = newErrorId();
        this.deps.log.warn(
          { taskId: task.id, containerId: slot.containerId, err: result.error, errorId },
          "could not reach an endpoint container",
        );
        direct.retry(task.id, taskError("EndpointProxyError", maskedDetailMessage("bad_gateway", errorId)));
      }
    } finally {
      clearTimeout(timer);
      unwatch();
    }
  }

  private endAborted(run: TaskRun, finish: (o: DirectOutcome) => void, answer: Answer): void {
    const id = run.task.id;
    if (run.why === "timeout") {
      const message = `the request ran past its timeout of ${run.stub.config.task_policy.timeout} s (task_policy.timeout)`;
      finish({ status: "TIMEOUT", error: taskError("TaskTimeout", message), reason: "timeout" });
      this.answerError(answer, new BerthError("task_timeout", message), id);
    } else if (run.why === "ended") {
      // Ended elsewhere: answer why it ended (an unplaceable request's reason, ...) when its error says.
      const err = run.endedWith;
      this.answerError(
        answer,
        err && isErrorCode(err.type)
          ? new BerthError(err.type, err.message)
          : new BerthError("task_cancelled", "the request's task was ended (cancelled) while it ran"),
        id,
      );
    } else {
      finish({
        status: "CANCELLED",
        error: taskError("TaskCancelled", "the caller disconnected"),
        reason: "client_disconnected",
      });
    }
  }

  /** An error of the request's task, answered through the public error edge with its task id (and logged there). */
  private answerError(
    answer: Answer,
    e: BerthError,
    taskId: string,
    headers: Record<string, string> = {},
  ): PublicError {
    const pe = publicError(e, {
      log: this.deps.log,
      what: "endpoint request failed",
      context: { taskId },
      extra: { task_id: taskId },
    });
    answer(pe.status, pe.body, { ...pe.headers, ...headers });
    return pe;
  }
}

/** How a dispatch answers the caller when the task ends without the container's answer. */
export type Answer = (status: number, body: unknown, headers: Record<string, string>) => void;

const BODY_LIMIT_HINT = ": send large inputs through a bucket or volume and pass their names";

/** Writes a JSON answer (with the request's task id) unless one was already started or the caller is gone. */
export function writeJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  taskId?: string,
  headers: Record<string, string> = {},
): void {
  writeJsonAnswer(res, status, body, taskId ? { ...headers, "x-task-id": taskId } : headers);
}

function parseObject(raw: Buffer): Record<string, unknown> {
  if (raw.length === 0) return {};
  let v: unknown;
  try {
    v = JSON.parse(raw.toString("utf8"));
  } catch (e) {
    throw new BerthError("invalid_json", `the body is not valid JSON: ${(e as Error).message}`);
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) {
    throw new BerthError(
      "invalid_request",
      "the body must be a JSON object whose keys are the handler's arguments",
    );
  }
  return v as Record<string, unknown>;
}

function callbackOf(body: Record<string, unknown>): string | null {
  const v = body.callback_url;
  if (v === undefined || v === null || v === "") return null;
  if (typeof v !== "string" || !/^https?:\/\/\S+$/i.test(v)) {
    throw new BerthError("invalid_request", "callback_url must be an http(s) URL");
  }
  return v;
}
