// The /v1 gateway end to end, against a real `berth up`
// cluster: a word bigram model trained at container start on the machine's
// license texts (test/fixtures/inference/bigram_app.py), served by an ASGI
// app deployed with `berth deploy`, reached by the unmodified `openai` npm
// client. Scale from zero, streaming, embeddings, invoke, usage rows with the
// server's token counts, OpenAI-shaped errors (404, 401, 429), a client that
// hangs up stopping the generation, two workspaces and the public catalog.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import OpenAI from "openai";
import { waitFor } from "../../shared/net.ts";
import { bearer } from "../helpers/auth.ts";
import { type BerthUp, CLI_BIN, startBerthUp, UP_COMMANDS } from "../helpers/berth-up.ts";
import { okJson as json, writeBigramApp } from "../helpers/bigram-app.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

interface UsageRow {
  model: string;
  route: string;
  stream: boolean;
  status: number;
  error_code: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  total_tokens: number | null;
  time_to_first_token_ms: number | null;
  token_id: string | null;
}

interface Generation {
  user: string | null;
  generated: number;
  max_tokens: number;
  finished: boolean;
  disconnected: boolean;
}

test("hosted inference: the /v1 gateway end to end on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up: BerthUp = await startBerthUp(td);
  writeBigramApp(up.appDir);
  const ws = (await json<{ external_id: string }>(await up.api("/api/v1/workspace/current"))).external_id;
  const deploy = async (target: string, env: NodeJS.ProcessEnv = up.env) => {
    const r = await new Promise<{ code: number; out: string }>((resolve) =>
      execFile(
        process.execPath,
        [CLI_BIN, "deploy", target],
        { cwd: up.appDir, env, timeout: 240_000 },
        (e, o, s) => resolve({ code: e ? 1 : 0, out: `${o}\n${s}` }),
      ),
    );
    assert.equal(r.code, 0, `berth deploy ${target}: ${r.out}\n${up.output()}`);
  };
  await deploy("app.py:tiny");
  await deploy("app.py:tiny_queue");
  const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: up.token, maxRetries: 0, timeout: 300_000 });
  const usage = async (token = up.token, wsId = ws) =>
    (
      await json<{ usage: UsageRow[] }>(
        await fetch(`${up.url}/api/v1/usage/${wsId}?limit=1000`, { headers: bearer(token) }),
      )
    ).usage;
  const generations = async () =>
    (await json<{ generations: Generation[] }>(await up.api("/endpoint/tiny/stats"))).generations;
  // A stream that generates until aborted, its first chunk read: it holds its model's slot.
  const heldStream = async (model: string) => {
    const hold = new AbortController();
    const stream = await client.chat.completions.create(
      { model, messages: [{ role: "user", content: "the" }], max_tokens: 100_000, stream: true },
      { signal: hold.signal },
    );
    const events = stream[Symbol.asyncIterator]();
    await events.next();
    return { hold, events };
  };

  await t.test(
    "a model scaled to zero answers its first request; its usage row holds the server's counts",
    async () => {
      const deps = await json<{ deployments: { id: string; name: string }[] }>(
        await up.api(`/api/v1/deployment/${ws}?name=tiny`),
      );
      const dep = deps.deployments[0];
      assert.ok(dep);
      const before = await json<{ containers: number }>(await up.api(`/api/v1/deployment/${ws}/${dep.id}`));
      assert.equal(before.containers, 0, "no container before the first request");
      const r = await client.chat.completions.create({
        model: "tiny-bigram",
        messages: [{ role: "user", content: "Licensed under the" }],
        max_tokens: 7,
      });
      assert.equal(r.object, "chat.completion");
      assert.equal(r.choices[0]?.message.content?.split(" ").length, 7);
      assert.deepEqual(r.usage, { prompt_tokens: 3, completion_tokens: 7, total_tokens: 10 });
      const row = (await usage()).find((u) => u.route === "chat.completions" && !u.stream);
      assert.ok(row, "a usage row");
      assert.equal(row.status, 200);
      assert.equal(row.model, "tiny-bigram");
      assert.deepEqual([row.prompt_tokens, row.completion_tokens, row.total_tokens], [3, 7, 10]);
      assert.ok(row.token_id, "the token is recorded");
    },
  );

  await t.test("lists the workspace's models", async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids.sort(), ["tiny-bigram", "tiny-queue"]);
  });

  await t.test(
    "streams a chat completion chunk by chunk; the usage chunk it did not ask for is stripped",
    async () => {
      const stream = await client.chat.completions.create({
        model: "tiny-bigram",
        messages: [{ role: "user", content: "the" }],
        max_tokens: 12,
        stream: true,
        user: "stream-plain",
      });
      const chunks = [];
      for await (const c of stream) chunks.push(c);
      const content = chunks.filter((c) => c.choices[0]?.delta.content);
      assert.equal(content.length, 12, "one chunk per generated word");
      assert.ok(
        chunks.every((c) => c.choices.length > 0 && !c.usage),
        "no usage chunk reaches a client that did not ask for one",
      );
      const row = (await usage()).find((u) => u.route === "chat.completions" && u.stream);
      assert.ok(row);
      assert.deepEqual([row.prompt_tokens, row.completion_tokens, row.total_tokens], [1, 12, 13]);
      assert.ok(row.time_to_first_token_ms !== null, "time to first token recorded");

      const asked = await client.chat.completions.create({
        model: "tiny-bigram",
        messages: [{ role: "user", content: "of the" }],
        max_tokens: 4,
        stream: true,
        stream_options: { include_usage: true },
      });
      let last: OpenAI.Chat.Completions.ChatCompletionChunk | undefined;
      for await (const c of asked) last = c;
      assert.deepEqual(last?.usage, { prompt_tokens: 2, completion_tokens: 4, total_tokens: 6 });
    },
  );

  await t.test("embeddings, a text completion and invoke", async () => {
    const e = await client.embeddings.create({
      model: "tiny-bigram",
      input: ["the License", "of the Work here"],
    });
    assert.equal(e.data.length, 2);
    assert.equal(e.data[0]?.embedding.length, 32);
    assert.equal(e.usage.prompt_tokens, 6);
    const c = await client.completions.create({ model: "tiny-bigram", prompt: "the", max_tokens: 3 });
    assert.equal(c.usage?.completion_tokens, 3);
    const r = await fetch(`${up.url}/v1/models/tiny-bigram/invoke`, {
      method: "POST",
      headers: { ...bearer(up.token), "content-type": "application/json" },
      body: JSON.stringify({ word: "the" }),
    });
    const body = await json<{ word: string; followers: number }>(r);
    assert.equal(body.word, "the");
    assert.ok(body.followers > 0);
    const routes = new Set((await usage()).map((u) => u.route));
    for (const route of ["embeddings", "completions", "invoke"]) assert.ok(routes.has(route), route);
  });

  await t.test("errors parse in the client: unknown model 404, no token 401", async () => {
    await assert.rejects(
      client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }),
      (e: unknown) =>
        e instanceof OpenAI.NotFoundError && e.code === "model_not_found" && e.type === "not_found_error",
    );
    const stranger = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: "bt_not-a-token", maxRetries: 0 });
    await assert.rejects(
      stranger.embeddings.create({ model: "tiny-bigram", input: "x" }),
      (e: unknown) => e instanceof OpenAI.AuthenticationError && e.code === "unauthenticated",
    );
    const r = await fetch(`${up.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny-bigram", messages: [] }),
    });
    assert.equal(r.status, 401);
    const body = (await r.json()) as { error: { message: string; type: string; code: string } };
    assert.equal(body.error.type, "authentication_error");
    assert.match(body.error.message, /Bearer/);
    const bad = await fetch(`${up.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...bearer(up.token), "content-type": "application/json" },
      body: "{not json",
    });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { code: string } }).error.code, "invalid_json");
  });

  await t.test("a full request queue answers 429 with Retry-After", async () => {
    // tiny-queue: one request at a time, one more may wait (max_pending_tasks=1).
    const { hold } = await heldStream("tiny-queue");
    const waiting = client.chat.completions
      .create(
        { model: "tiny-queue", messages: [{ role: "user", content: "x" }], max_tokens: 1 },
        { signal: hold.signal },
      )
      .catch((e: unknown) => e);
    await waitFor(
      async () => {
        const l = await json<{ usage: { pending_tasks: number } }>(
          await up.api(`/api/v1/workspace/${ws}/limits`),
        );
        return l.usage.pending_tasks >= 1;
      },
      { timeoutMs: 60_000, what: "the second request to wait in the queue" },
    );
    await assert.rejects(
      client.chat.completions.create({ model: "tiny-queue", messages: [{ role: "user", content: "y" }] }),
      (e: unknown) =>
        e instanceof OpenAI.RateLimitError &&
        e.type === "rate_limit_error" &&
        Number(e.headers?.get("retry-after")) >= 1,
    );
    hold.abort();
    await waiting;
  });

  await t.test("a client that hangs up mid-stream stops the generation upstream", async () => {
    const ctl = new AbortController();
    const stream = await client.chat.completions.create(
      {
        model: "tiny-bigram",
        messages: [{ role: "user", content: "the" }],
        max_tokens: 100_000,
        stream: true,
        user: "hang-up",
      },
      { signal: ctl.signal },
    );
    let got = 0;
    try {
      for await (const c of stream) {
        if (c.choices[0]?.delta.content) got++;
        if (got === 3) {
          // Chunks the client already parsed would still be yielded after abort(): stop reading too.
          ctl.abort();
          break;
        }
      }
    } catch (e) {
      // The client ends the iteration, or throws its abort error: either way it hung up.
      if (!(e instanceof OpenAI.APIUserAbortError)) throw e;
    }
    assert.equal(got, 3);
    let gen: Generation | undefined;
    await waitFor(
      async () => {
        gen = (await generations()).find((g) => g.user === "hang-up");
        return gen?.disconnected === true;
      },
      { timeoutMs: 60_000, what: "the model server to see its client gone" },
    );
    assert.ok(gen && !gen.finished && gen.generated < gen.max_tokens, JSON.stringify(gen));
    await waitFor(async () => (await usage()).some((u) => u.status === 499 && u.error_code === "cancelled"), {
      timeoutMs: 10_000,
      what: "the cancelled request's usage row",
    });
  });

  await t.test("two workspaces see their own models plus the public catalog", async () => {
    const made = await json<{ token: string; workspace: { external_id: string } }>(
      await up.api("/api/v1/workspace", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "second" }),
      }),
    );
    const other = made.token;
    await deploy("app.py:own_model", { ...up.env, SERVICE_TOKEN: other });
    const published = await up.api("/api/v1/catalog", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ deployment: "tiny" }),
    });
    assert.equal(published.status, 200, await published.clone().text());
    const denied = await fetch(`${up.url}/api/v1/catalog`, {
      method: "POST",
      headers: { ...bearer(other), "content-type": "application/json" },
      body: JSON.stringify({ deployment: "own-model" }),
    });
    assert.equal(denied.status, 403, "publishing needs an admin token");

    const ids = async (token?: string) => {
      const r = await fetch(`${up.url}/v1/models`, { headers: token ? bearer(token) : {} });
      return ((await json<{ data: { id: string }[] }>(r)).data.map((m) => m.id) as string[]).sort();
    };
    assert.deepEqual(await ids(), ["tiny-bigram"], "without a token: the public catalog");
    assert.deepEqual(await ids(up.token), ["tiny-bigram", "tiny-queue"]);
    assert.deepEqual(await ids(other), ["own-bigram", "tiny-bigram"]);

    const client2 = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: other, maxRetries: 0, timeout: 300_000 });
    await assert.rejects(
      client2.chat.completions.create({ model: "tiny-queue", messages: [{ role: "user", content: "x" }] }),
      (e: unknown) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found",
    );
    const r = await client2.chat.completions.create({
      model: "tiny-bigram",
      messages: [{ role: "user", content: "the" }],
      max_tokens: 2,
    });
    assert.equal(r.usage?.completion_tokens, 2);
    const rows = await usage(other, made.workspace.external_id);
    assert.ok(
      rows.some((u) => u.model === "tiny-bigram" && u.status === 200),
      "the caller's workspace is billed",
    );
    const theirs = await fetch(`${up.url}/api/v1/usage/${ws}`, { headers: bearer(other) });
    assert.equal(theirs.status, 404, "another workspace's usage reads as not found");
  });

  await t.test(
    "limits: concurrent requests and tokens per minute, in the limits route and enforced",
    async () => {
      const put = (body: unknown) =>
        up.api(`/api/v1/workspace/${ws}/limits`, {
          method: "PUT",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      const l = await json<{ limits: Record<string, unknown>; usage: Record<string, number> }>(
        await put({ max_tokens_per_minute: 1 }),
      );
      assert.equal(l.limits.max_tokens_per_minute, 1);
      assert.ok((l.usage.tokens_last_minute ?? 0) > 1, "the tokens of the last minute are counted");
      await assert.rejects(
        client.embeddings.create({ model: "tiny-bigram", input: "x" }),
        (e: unknown) =>
          e instanceof OpenAI.RateLimitError &&
          e.code === "limit_exceeded" &&
          /max_tokens_per_minute/.test(e.message),
      );
      await json(await put({ max_tokens_per_minute: null, max_inference_requests: 1 }));
      // One stream in flight takes the workspace's one request.
      const hold = new AbortController();
      const held = await client.chat.completions.create(
        {
          model: "tiny-bigram",
          messages: [{ role: "user", content: "the" }],
          max_tokens: 100_000,
          stream: true,
        },
        { signal: hold.signal },
      );
      await held[Symbol.asyncIterator]().next();
      const busy = await json<{ usage: Record<string, number> }>(
        await up.api(`/api/v1/workspace/${ws}/limits`),
      );
      assert.equal(busy.usage.inference_requests, 1);
      await assert.rejects(
        client.embeddings.create({ model: "tiny-bigram", input: "x" }),
        (e: unknown) => e instanceof OpenAI.RateLimitError && /max_inference_requests/.test(e.message),
      );
      hold.abort();
      await json(await put({ max_inference_requests: null }));
      const ok = await client.embeddings.create({ model: "tiny-bigram", input: "x" });
      assert.equal(ok.data.length, 1);
    },
  );

  await t.test(
    "limits: v1_tokens_per_month counts the month's tokens, refuses new requests, never cuts a stream",
    async () => {
      const put = (body: unknown) =>
        up.api(`/api/v1/workspace/${ws}/limits`, {
          method: "PUT",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      const { hold, events } = await heldStream("tiny-bigram");
      const before = await json<{ usage: Record<string, number> }>(
        await up.api(`/api/v1/workspace/${ws}/limits`),
      );
      const used = before.usage.v1_tokens_this_month ?? 0;
      assert.ok(used > 0, "the month's /v1 tokens are counted from the usage rows");
      const l = await json<{ limits: Record<string, unknown> }>(await put({ v1_tokens_per_month: used }));
      assert.equal(l.limits.v1_tokens_per_month, used);
      await assert.rejects(
        client.embeddings.create({ model: "tiny-bigram", input: "x" }),
        (e: unknown) =>
          e instanceof OpenAI.RateLimitError &&
          e.code === "limit_exceeded" &&
          /used \d+ of its \d+ \/v1 tokens this month \(limit v1_tokens_per_month\).*refused until \d{4}-\d\d-01T00:00:00\.000Z/.test(
            e.message,
          ),
      );
      for (let i = 0; i < 5; i++) assert.equal((await events.next()).done, false, "the stream runs on");
      hold.abort();
      await json(await put({ v1_tokens_per_month: null }));
      const ok = await client.embeddings.create({ model: "tiny-bigram", input: "x" });
      assert.equal(ok.data.length, 1);
    },
  );
});
