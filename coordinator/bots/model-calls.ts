// A transition's `context.chat(...)` (docs/bots.md, "The model"): the
// container asks over its agent's socket (op `model.chat`, relayed like
// Queue and Map, so the workspace is the one the agent started it for), and
// the coordinator sends the request to its own /v1 gateway over loopback,
// with a token of that workspace. So a bot's model calls are routed, limited,
// scaled from zero and metered (usage rows) exactly as any client's. (A real
// connection, not Fastify's inject: the gateway's response path works on a
// real socket.)
//
// The token is minted per workspace the first time a bot of it calls a model
// and held only in this process's memory (the store keeps its hash, as for
// every token); it is revoked when the coordinator stops.

import { BerthError, isErrorCode } from "../../shared/errors.ts";
import type { TokenRepo } from "../store/index.ts";

/** One POST to this coordinator's own server (`selfPost` in index.ts). */
export type Inject = (o: {
  method: "POST";
  url: string;
  headers: Record<string, string>;
  payload: string;
}) => Promise<{ statusCode: number; body: string }>;

export const BOT_TOKEN_NAME = "berth bots: model calls";

export class BotModelCalls {
  private readonly tokens = new Map<string, Promise<{ id: string; secret: string }>>();

  constructor(
    private readonly repo: Pick<TokenRepo, "create" | "revoke">,
    private readonly inject: () => Inject,
  ) {}

  /** One chat completion in the workspace; OpenAI's response object. */
  async chat(workspaceId: string, body: unknown): Promise<unknown> {
    if (!body || typeof body !== "object" || Array.isArray(body))
      throw new BerthError("invalid_request", "model.chat needs body: a chat completion request object");
    const b = body as Record<string, unknown>;
    if (b.stream === true)
      throw new BerthError("invalid_request", "model.chat answers whole completions: stream must be false");
    const token = await this.token(workspaceId);
    const r = await this.inject()({
      method: "POST",
      url: "/v1/chat/completions",
      headers: { authorization: `Bearer ${token.secret}`, "content-type": "application/json" },
      payload: JSON.stringify({ ...b, stream: false }),
    });
    let answer: unknown;
    try {
      answer = JSON.parse(r.body);
    } catch {
      throw new BerthError("unavailable", `the model answered ${r.statusCode} without JSON`);
    }
    if (r.statusCode >= 400) {
      const err = (answer as { error?: { code?: unknown; message?: unknown } }).error;
      const code = typeof err?.code === "string" && isErrorCode(err.code) ? err.code : "unavailable";
      const message = typeof err?.message === "string" ? err.message : `the model answered ${r.statusCode}`;
      throw new BerthError(code, message);
    }
    return answer;
  }

  /** Revokes the tokens this process minted. */
  async close(): Promise<void> {
    const minted = [...this.tokens.entries()];
    this.tokens.clear();
    await Promise.allSettled(minted.map(async ([ws, t]) => this.repo.revoke(ws, (await t).id)));
  }

  private token(workspaceId: string): Promise<{ id: string; secret: string }> {
    let t = this.tokens.get(workspaceId);
    if (!t) {
      t = this.repo
        .create(workspaceId, { name: BOT_TOKEN_NAME })
        .then((c) => ({ id: c.record.id, secret: c.secret }));
      t.catch(() => this.tokens.delete(workspaceId));
      this.tokens.set(workspaceId, t);
    }
    return t;
  }
}
