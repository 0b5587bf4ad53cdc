// /v1 without HTTP, for callers inside the coordinator (a bot's model calls,
// docs/bots.md): the same request path as an HTTP client's (./gateway.ts) —
// the model's deployment, the workspace's limits, scale-from-zero, the usage
// row and the metrics — with the caller's workspace given rather than read
// from a token, and the answer collected in memory (./answer-sink.ts). The
// usage row has no token id: none was used.

import { BerthError, isErrorCode } from "../../shared/errors.ts";
import { CollectedAnswer, type InferenceAnswer } from "./answer-sink.ts";
import type { InferenceGateway, InferenceRoute } from "./gateway.ts";
import { ROUTE_PATHS } from "./gateway.ts";

export interface InProcessOptions {
  /** invoke: the model (for the other routes the body's `model` names it). */
  model?: string;
  /** Aborting is the caller leaving: the model server's request is aborted, the usage row says 499. */
  signal?: AbortSignal;
}

export class InProcessInference {
  constructor(private readonly gateway: Pick<InferenceGateway, "handle">) {}

  /**
   * One request in the workspace, answered whole: OpenAI's answer or its
   * error body, with the status an HTTP client would have got. Rejects only
   * when `signal` aborts first (with its reason).
   */
  async complete(
    workspaceId: string,
    route: InferenceRoute,
    body: Record<string, unknown>,
    o: InProcessOptions = {},
  ): Promise<InferenceAnswer> {
    const path =
      route === "invoke" ? `/v1/models/${encodeURIComponent(o.model ?? "")}/invoke` : ROUTE_PATHS[route];
    const answer = new CollectedAnswer();
    const leave = () => answer.destroy();
    o.signal?.addEventListener("abort", leave, { once: true });
    try {
      if (o.signal?.aborted) throw o.signal.reason;
      await this.gateway.handle(
        route,
        {
          ...(route === "invoke" ? { pathModel: o.model ?? "" } : {}),
          caller: async () => ({ workspaceId, tokenId: null }),
          request: async () => ({ body: Buffer.from(JSON.stringify(body)), path, headers: {} }),
        },
        answer,
      );
      // The gateway returns once the answer ended or broke off (the caller left, the model server hung up).
      if (!answer.writableFinished)
        throw o.signal?.aborted
          ? o.signal.reason
          : new BerthError("unavailable", "the model's answer broke off");
      return answer.answer();
    } finally {
      o.signal?.removeEventListener("abort", leave);
    }
  }

  /**
   * One chat completion (`stream` false: the answer is one object); OpenAI's
   * response object, or a BerthError with the code and message an HTTP
   * client would have read.
   */
  async chat(workspaceId: string, body: Record<string, unknown>, o: InProcessOptions = {}): Promise<unknown> {
    if (body.stream === true)
      throw new BerthError(
        "invalid_request",
        "an in-process chat answers whole completions: stream must be false",
      );
    const a = await this.complete(workspaceId, "chat.completions", body, o);
    let answer: unknown;
    try {
      answer = JSON.parse(a.body.toString("utf8"));
    } catch {
      throw new BerthError("unavailable", `the model answered ${a.status} without JSON`);
    }
    if (a.status >= 400) {
      const err = (answer as { error?: { code?: unknown; message?: unknown } } | null)?.error;
      const code = typeof err?.code === "string" && isErrorCode(err.code) ? err.code : "unavailable";
      const message = typeof err?.message === "string" ? err.message : `the model answered ${a.status}`;
      throw new BerthError(code, message);
    }
    return answer;
  }
}
