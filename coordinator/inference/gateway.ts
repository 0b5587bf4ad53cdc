// The /v1 gateway's request path (docs/inference.md): caller, limits, body,
// the model's deployment, then the endpoints' request buffer (admission
// against max_pending_tasks, a task per request, waiting for a container
// slot while a scaled-to-zero deployment starts, expiry) and one exchange
// with the model server per try. Every refusal is OpenAI's error shape; every
// request with a workspace leaves a usage row.
//
// Two callers take this one path: HTTP clients of /v1 (./routes.ts reads
// their token and body) and in-process callers such as bots' model calls
// (./in-process.ts, no token and no HTTP). Each hands `handle` an
// InferenceSource and an AnswerSink.

import type { Logger } from "pino";
import { BerthError, CATALOG, isErrorCode } from "../../shared/errors.ts";
import type { EndpointDispatcher, TaskRun } from "../endpoints/index.ts";
import { RUNNER_HTTP_PORT } from "../endpoints/index.ts";
import { HttpRefusal, openAiType, publicError, writeJsonAnswer } from "../http/index.ts";
import type { UsageRecord } from "./store.ts";
import type { Principal } from "../store/index.ts";
import type { AnswerSink } from "./answer-sink.ts";
import type { InferenceLimiter, InferenceLimits } from "./limiter.ts";
import type { InferenceMetrics } from "./metrics.ts";
import type { ModelDirectory } from "./models.ts";
import { type Exchange, forwardModel } from "./upstream.ts";
import type { UsageWriter } from "./usage-writer.ts";

export type InferenceRoute = "chat.completions" | "completions" | "embeddings" | "invoke";

/** The OpenAI path of each route but invoke (`/v1/models/{model}/invoke`). */
export const ROUTE_PATHS: Record<Exclude<InferenceRoute, "invoke">, string> = {
  "chat.completions": "/v1/chat/completions",
  completions: "/v1/completions",
  embeddings: "/v1/embeddings",
};

/** Request bodies of /v1 (prompts, embedding inputs). */
export const INFERENCE_BODY_LIMIT = 32 * 1024 * 1024;
/** The header that keeps a session's requests on one container where it can. */
export const SESSION_HEADER = "x-session-id";
const SESSION_TTL_MS = 10 * 60_000;
const MAX_SESSIONS = 100_000;
/** Retry-After of a full request queue (max_pending_tasks). */
const QUEUE_FULL_RETRY_S = 1;

export interface InferenceDeps {
  endpoints: EndpointDispatcher;
  models: ModelDirectory;
  /** Where finished requests' rows go (batched to the store). */
  usage: Pick<UsageWriter, "add" | "close" | "flush">;
  limits(workspaceId: string): Promise<InferenceLimits>;
  limiter: InferenceLimiter;
  /** The workspace's /v1 tokens per month (the limits area's V1TokenBudget); none: no budget is checked. */
  tokenBudget?: TokenBudget;
  metrics?: InferenceMetrics;
  log: Logger;
  clock?: () => number;
}

/** A monthly token budget: check() throws limit_exceeded once it is used; spent() counts a request's tokens as it ends. */
export interface TokenBudget {
  check(workspaceId: string): Promise<void>;
  spent(workspaceId: string, tokens: number): void;
}

/** Who a request is for: its workspace, and the token it came with (none in process). */
export interface InferenceCaller {
  workspaceId: string;
  tokenId: string | null;
  /** Throws permission_denied when the caller's token may not call this model's deployment (a narrowed token). */
  mayCall?: (deployment: { name: string; workspaceId: string }) => void;
}

/** What a request asks, read once its caller is known. */
export interface InferenceRequest {
  /** The JSON body as the caller sent it. */
  body: Buffer;
  /** The OpenAI path an ASGI model app gets (an endpoint handler gets "/"). */
  path: string;
  /** The caller's headers the model server gets besides the gateway's own (none in process). */
  headers: Record<string, string | string[]>;
  /** The caller's session (X-Session-Id): kept on one container where it can. */
  session?: string;
}

/** Where a request comes from; each step may refuse (throw) and is answered in OpenAI's shape. */
export interface InferenceSource {
  /** invoke: the model named in the path. */
  pathModel?: string;
  caller(): Promise<InferenceCaller>;
  request(): Promise<InferenceRequest>;
}

/** An error as /v1 answers it: OpenAI's `{error: {message, type, code}}`. */
export function sendOpenAiError(res: AnswerSink, e: unknown, log?: Logger): { status: number; code: string } {
  const pe = publicError(e, { shape: "openai", ...(log ? { log, what: "inference request failed" } : {}) });
  writeJsonAnswer(res, pe.status, pe.body, pe.headers);
  return { status: pe.status, code: pe.error.code };
}

export class InferenceGateway {
  private readonly clock: () => number;
  private readonly sessions = new Map<string, { containerId: string; at: number }>();

  constructor(readonly d: InferenceDeps) {
    this.clock = d.clock ?? Date.now;
  }

  /** The coordinator stops: the queued usage rows are written. */
  close(): Promise<void> {
    return this.d.usage.close();
  }

  /** Writes the finished requests' queued usage rows now (a count of the month's tokens reads them); a failed write stays queued. */
  async writeUsage(): Promise<void> {
    await this.d.usage.flush().catch(() => {});
  }

  /** The caller's principal; unauthenticated (401) without a valid token. */
  async principal(authorization: string | undefined, required: true): Promise<Principal>;
  async principal(authorization: string | undefined, required: false): Promise<Principal | undefined>;
  async principal(authorization: string | undefined, required: boolean): Promise<Principal | undefined> {
    if (!authorization) {
      if (!required) return undefined;
      throw new BerthError(
        "unauthenticated",
        "inference needs 'Authorization: Bearer <token>' of a workspace",
      );
    }
    const p = await this.d.endpoints.auth.principal(authorization);
    if (!p) throw new BerthError("unauthenticated", "unknown or revoked token");
    return p;
  }

  /** One request, start to end, answered into `res`; never rejects. */
  async handle(route: InferenceRoute, source: InferenceSource, res: AnswerSink): Promise<void> {
    const t0 = this.clock();
    const seen: Exchange = {};
    let caller: InferenceCaller | undefined;
    let model = source.pathModel ?? "";
    let stream = false;
    let admitted = false;
    let deploymentId: string | null = null;
    let run: TaskRun | undefined;
    let outcome: { status: number; code: string | null } | undefined;
    try {
      caller = await source.caller();
      const ws = caller.workspaceId;
      // What needs only the caller runs first: an HTTP client's body is usually still on its way.
      // A request admitted earlier runs (and streams) to its end.
      await this.d.tokenBudget?.check(ws).catch((e: unknown) => {
        throw budgetRefusal(e, this.clock());
      });
      this.d.limiter.admit(ws, await this.d.limits(ws));
      admitted = true;
      const asked = await source.request();
      let body = asked.body;
      let stripUsageChunk = false;
      if (route !== "invoke") {
        const json = parseBody(asked.body);
        if (typeof json.model !== "string" || !json.model)
          throw new BerthError("invalid_request", "the body needs `model`: a model id from GET /v1/models");
        model = json.model;
        stream = json.stream === true;
        // Ask a stream for its usage chunk when the client did not, and drop that chunk again.
        if (stream && route !== "embeddings") {
          const so = json.stream_options;
          const included =
            so && typeof so === "object" && (so as { include_usage?: unknown }).include_usage === true;
          if (!included) {
            json.stream_options = { ...(so && typeof so === "object" ? so : {}), include_usage: true };
            body = Buffer.from(JSON.stringify(json));
            stripUsageChunk = true;
          }
        }
      }
      const entry = await this.d.models.find(ws, model);
      if (!entry)
        throw new BerthError(
          "model_not_found",
          `no model '${model}' in this workspace or the public catalog; GET /v1/models lists them`,
        );
      caller.mayCall?.(entry.deployment);
      const { deployment, stub } = await this.d.endpoints.deps.deployments.resolveById(entry.deployment.id);
      deploymentId = deployment.id;
      this.d.endpoints.deps.deployments.noteRequest(deployment.id);
      const kind = stub.type.split("/")[0];
      run = await this.d.endpoints.open(stub, null, (e) => {
        outcome = sendOpenAiError(res, queueFull(e), this.d.log);
      });
      if (!run) return;
      const taskRun = run;
      const key = asked.session ? `${stub.id}\u0000${asked.session}` : undefined;
      const kept = key ? this.sessions.get(key) : undefined;
      if (kept && t0 - kept.at < SESSION_TTL_MS) run.prefer = kept.containerId;
      const headers = { ...asked.headers };
      headers["x-task-id"] = run.task.id;
      headers["content-type"] = "application/json";
      headers["content-length"] = String(body.length);
      // An endpoint's handler takes the JSON body; an ASGI app gets the OpenAI path.
      const path = kind === "endpoint" ? "/" : asked.path;
      const onClose = () => {
        if (!res.writableFinished) this.d.endpoints.abort(taskRun, "caller");
      };
      res.on("close", onClose);
      try {
        await this.d.endpoints.dispatch(
          run,
          (slot) => {
            if (key) this.keepSession(key, slot.containerId);
            return forwardModel({
              agent: this.d.endpoints.deps.tunnels.httpAgent(
                slot.agentId,
                slot.containerId,
                RUNNER_HTTP_PORT,
              ),
              containerId: slot.containerId,
              port: RUNNER_HTTP_PORT,
              path,
              headers,
              body,
              res,
              taskId: taskRun.task.id,
              signal: taskRun.controller.signal,
              stripUsageChunk,
              seen,
              clock: this.clock,
            });
          },
          (status, errBody, hdrs) => {
            if (res.headersSent) return void res.destroy();
            const oa = openAiBody(status, errBody);
            seen.errorCode = oa.code;
            writeJsonAnswer(res, oa.status, oa.body, hdrs);
          },
        );
      } finally {
        res.off("close", onClose);
      }
    } catch (e) {
      outcome = sendOpenAiError(res, e, this.d.log);
    } finally {
      if (admitted && caller) this.d.limiter.release(caller.workspaceId);
      this.finish({ t0, caller, model, route, stream, deploymentId, run, seen, res, outcome });
    }
  }

  private keepSession(key: string, containerId: string): void {
    if (this.sessions.size >= MAX_SESSIONS) this.sessions.clear();
    this.sessions.set(key, { containerId, at: this.clock() });
  }

  private finish(o: {
    t0: number;
    caller: InferenceCaller | undefined;
    model: string;
    route: InferenceRoute;
    stream: boolean;
    deploymentId: string | null;
    run: TaskRun | undefined;
    seen: Exchange;
    res: AnswerSink;
    outcome: { status: number; code: string | null } | undefined;
  }): void {
    const end = this.clock();
    const callerLeft =
      o.run?.why === "caller" || (!o.res.writableFinished && !o.outcome && !o.seen.errorCode);
    const status = callerLeft ? 499 : (o.outcome?.status ?? o.res.statusCode);
    // A server's own 4xx/5xx answer (passed through as it was) is "upstream_error".
    const errorCode =
      o.outcome?.code ??
      o.seen.errorCode ??
      (callerLeft ? "cancelled" : status >= 400 ? "upstream_error" : null);
    const u = o.seen.usage;
    const ttftMs = o.seen.firstByteAt !== undefined ? o.seen.firstByteAt - o.t0 : null;
    this.d.metrics?.observe(o.route, status, u, ttftMs, end - o.t0);
    if (!o.caller) return;
    const ws = o.caller.workspaceId;
    if (u?.totalTokens) {
      this.d.limiter.addTokens(ws, u.totalTokens);
      this.d.tokenBudget?.spent(ws, u.totalTokens);
    }
    const rec: UsageRecord = {
      workspaceId: ws,
      tokenId: o.caller.tokenId,
      model: o.model.slice(0, 256),
      route: o.route,
      deploymentId: o.deploymentId,
      taskId: o.run?.task.id ?? null,
      stream: o.stream,
      status,
      errorCode,
      promptTokens: u?.promptTokens ?? null,
      completionTokens: u?.completionTokens ?? null,
      totalTokens: u?.totalTokens ?? null,
      ttftMs,
      durationMs: end - o.t0,
      atMs: o.t0,
    };
    // Queued: written with others off the request's path (./usage-writer.ts).
    this.d.usage.add(rec);
  }
}

/** A used monthly budget answers 429 like the other /v1 limits, with Retry-After until it resets. */
function budgetRefusal(e: unknown, nowMs: number): unknown {
  if (!(e instanceof BerthError) || e.code !== "limit_exceeded") return e;
  const resets = Date.parse(String(e.details?.resets_at ?? ""));
  const retryAfterS = Number.isFinite(resets) ? Math.max(1, Math.ceil((resets - nowMs) / 1000)) : 3600;
  return new HttpRefusal("limit_exceeded", e.message, {
    status: 429,
    headers: { "retry-after": String(retryAfterS) },
    ...(e.details ? { details: e.details } : {}),
  });
}

/** A full request queue (the endpoints' 429) says when to come back. */
function queueFull(e: unknown): unknown {
  if (e instanceof BerthError && e.code === "resource_exhausted")
    return new HttpRefusal("resource_exhausted", e.message, {
      status: 429,
      headers: { "retry-after": String(QUEUE_FULL_RETRY_S) },
    });
  return e;
}

/** The dispatcher's `{error: {code, message}}` answer in OpenAI's shape; a request that expired waiting is 504. */
function openAiBody(status: number, body: unknown): { status: number; body: unknown; code: string } {
  const err = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  const code = typeof err?.code === "string" ? err.code : "internal";
  const message = typeof err?.message === "string" ? err.message : "the request failed";
  const type = isErrorCode(code) ? openAiType(CATALOG[code].kind) : "server_error";
  return {
    status: code === "task_expired" ? 504 : status,
    body: { error: { message, type, code } },
    code,
  };
}

function parseBody(raw: Buffer): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(raw.toString("utf8"));
  } catch (e) {
    throw new BerthError("invalid_json", `the body is not valid JSON: ${(e as Error).message}`);
  }
  if (!v || typeof v !== "object" || Array.isArray(v))
    throw new BerthError("invalid_request", "the body must be a JSON object with `model`");
  return v as Record<string, unknown>;
}
