// A transition's `context.chat(...)` (docs/bots.md, "The model"): the
// container asks over its agent's socket (op `model.chat`, relayed like
// Queue and Map, so the workspace is the one the agent started it for), and
// the coordinator asks its /v1 gateway in process (InProcessInference): no
// token and no HTTP, but the gateway's one request path, so a bot's model
// calls are routed, limited, scaled from zero and metered (usage rows,
// metrics) exactly as any client's.

import { BerthError } from "../../shared/errors.ts";
import { MAX_MODEL_CALL_MS } from "../../shared/objects.ts";
import type { InProcessInference } from "../inference/index.ts";
import type { RelayRouter } from "../streams/index.ts";

/** What the model calls need of inference: one whole chat completion in a workspace. */
export type BotInference = Pick<InProcessInference, "chat">;

export class BotModelCalls {
  constructor(
    private readonly inference: BotInference,
    /** Longest a call may take: a model scaled to zero starts first. */
    private readonly maxCallMs = MAX_MODEL_CALL_MS,
  ) {}

  /** One chat completion in the workspace; OpenAI's response object. */
  async chat(workspaceId: string, body: unknown): Promise<unknown> {
    if (!body || typeof body !== "object" || Array.isArray(body))
      throw new BerthError("invalid_request", "model.chat needs body: a chat completion request object");
    const b = body as Record<string, unknown>;
    if (b.stream === true)
      throw new BerthError("invalid_request", "model.chat answers whole completions: stream must be false");
    // Past the bound the call is a caller that left: the model server's request is aborted, the row says 499.
    const timeout = new AbortController();
    const timer = setTimeout(
      () => timeout.abort(new BerthError("unavailable", "the model did not answer in time")),
      this.maxCallMs,
    );
    try {
      return await this.inference.chat(workspaceId, { ...b, stream: false }, { signal: timeout.signal });
    } finally {
      clearTimeout(timer);
    }
  }

  /** Answers the containers' op model.chat (`{body}` → `{response}`) through the relay router. */
  serveOn(router: Pick<RelayRouter, "serve">): void {
    router.serve("model.chat", async (call) => ({
      response: await this.chat(call.workspaceId, call.json().body),
    }));
  }
}
