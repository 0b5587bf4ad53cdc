// A transition's model call as the coordinator makes it (coordinator/bots/
// model-calls.ts, index.ts selfPost): a POST to the server's own listening
// address with a token of the workspace, minted once per workspace and held
// in memory, revoked when the coordinator stops; OpenAI's errors become
// berth errors with their code. The server here is a real HTTP server that
// checks the token against the real token store and answers as /v1 would.

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { after, before, describe, test } from "node:test";
import { selfPost } from "../../coordinator/bots/index.ts";
import { BOT_TOKEN_NAME, BotModelCalls } from "../../coordinator/bots/model-calls.ts";
import { Store } from "../../coordinator/store/store.ts";
import { BerthError } from "../../shared/errors.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";

const sqlite = STORE_ENGINES.find((e) => e.name === "sqlite");
if (!sqlite) throw new Error("no sqlite engine");

describe("bots' model calls", () => {
  let store: Store;
  let server: Server;
  const seen: { workspace: string; body: Record<string, unknown> }[] = [];
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    store = await Store.open(await sqlite.url({ after: (fn) => cleanups.push(fn) }));
    server = createServer((req, res) => {
      let raw = "";
      req.on("data", (c) => (raw += c));
      req.on("end", async () => {
        const p = await store.tokens.authenticate((req.headers.authorization ?? "").replace(/^Bearer /, ""));
        const send = (status: number, body: unknown) => {
          res.writeHead(status, { "content-type": "application/json" });
          res.end(JSON.stringify(body));
        };
        if (!p)
          return send(401, {
            error: { message: "unknown token", type: "authentication_error", code: "unauthenticated" },
          });
        const body = JSON.parse(raw) as Record<string, unknown>;
        seen.push({ workspace: p.workspace.id, body });
        if (req.url !== "/v1/chat/completions")
          return send(404, { error: { message: req.url, type: "x", code: "route_not_found" } });
        if (body.model !== "tiny")
          return send(404, {
            error: { message: `no model '${body.model}'`, type: "not_found_error", code: "model_not_found" },
          });
        send(200, {
          object: "chat.completion",
          choices: [{ message: { role: "assistant", content: "hello there" } }],
        });
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  });
  after(async () => {
    await new Promise((r) => server?.close(r));
    await store?.close();
    for (const fn of cleanups.reverse()) await fn();
  });

  test("calls go to the server's own /v1 with one token per workspace, revoked at close", async () => {
    const a = await store.workspaces.create("a");
    const b = await store.workspaces.create("b");
    const calls = new BotModelCalls(store.tokens, () => selfPost(server));
    const ask = { model: "tiny", messages: [{ role: "user", content: "hi" }] };
    const r = (await calls.chat(a.id, ask)) as { choices: { message: { content: string } }[] };
    assert.equal(r.choices[0]?.message.content, "hello there");
    await calls.chat(a.id, ask);
    await calls.chat(b.id, { ...ask, stream: false });
    assert.deepEqual(
      seen.map((s) => s.workspace),
      [a.id, a.id, b.id],
      "each call in its own workspace",
    );
    assert.equal(seen[0]?.body.stream, false);
    const minted = async (ws: string) =>
      (await store.tokens.list(ws)).filter((t) => t.name === BOT_TOKEN_NAME);
    assert.equal((await minted(a.id)).length, 1, "one token per workspace");
    await calls.close();
    for (const ws of [a.id, b.id]) {
      const tokens = await minted(ws);
      assert.equal(tokens.length, 1);
      assert.ok(tokens[0]?.revokedAt, "revoked when the coordinator stops");
    }
  });

  test("OpenAI's errors keep their code; a stream or a body that is no object is refused", async () => {
    const ws = await store.workspaces.create("c");
    const calls = new BotModelCalls(store.tokens, () => selfPost(server));
    await assert.rejects(
      calls.chat(ws.id, { model: "nope", messages: [] }),
      (e: unknown) =>
        e instanceof BerthError && e.code === "model_not_found" && /no model 'nope'/.test(e.message),
    );
    await assert.rejects(
      calls.chat(ws.id, { model: "tiny", stream: true }),
      (e: unknown) => e instanceof BerthError && e.code === "invalid_request",
    );
    await assert.rejects(calls.chat(ws.id, ["not", "an", "object"]), /chat completion request object/);
    await calls.close();
  });
});
