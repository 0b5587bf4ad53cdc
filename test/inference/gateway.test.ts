// The /v1 gateway over the endpoints' request buffer, with a real task
// service (nats-server, SQLite) and the endpoint harness's fakes for the
// deployments and containers; the "containers" are local HTTP servers
// speaking OpenAI's API (streams with and without a usage chunk, embeddings).
// Checks what the end-to-end test (test/e2e/inference.test.ts) cannot pin down
// cheaply: what the server was sent, which container took a session, expiry.

import assert from "node:assert/strict";
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import Fastify from "fastify";
import pino from "pino";
import { createInference, InProcessInference } from "../../coordinator/inference/index.ts";
import { V1TokenBudget, monthOf } from "../../coordinator/limits/budgets.ts";
import { UsageService } from "../../coordinator/usage/report.ts";
import { UsageRepo } from "../../coordinator/usage/store.ts";
import { inferenceRoutes } from "../../coordinator/inference/routes.ts";
import type { InferenceGateway } from "../../coordinator/inference/gateway.ts";
import type { DeploymentWithStub } from "../../coordinator/deployments/store.ts";
import type { UsageRow } from "../../coordinator/inference/store.ts";
import { waitFor } from "../../shared/net.ts";
import { bearer } from "../helpers/auth.ts";
import { perSuite } from "../helpers/suite.ts";
import { type EndpointHarness, modelDeployment, startEndpointHarness } from "../endpoints/harness.ts";

/** A model server: streams `max_tokens` words, a usage chunk when asked; remembers bodies and hang-ups. */
class ModelServer {
  readonly server: Server;
  readonly bodies: Record<string, unknown>[] = [];
  hangUps = 0;
  port = 0;
  /** Requests held until release() (to fill slots). */
  private held: (() => void)[] = [];

  constructor(readonly name: string) {
    this.server = createServer((req, res) => void this.handle(req, res));
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  release(): void {
    for (const r of this.held.splice(0)) r();
  }

  async stop(): Promise<void> {
    this.release();
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString() || "{}") as Record<string, unknown>;
    this.bodies.push({ ...body, _path: req.url, _auth: req.headers.authorization ?? null });
    if (body.hold) await new Promise<void>((r) => this.held.push(r));
    const n = Number(body.max_tokens ?? 3);
    const usage = { prompt_tokens: 5, completion_tokens: n, total_tokens: 5 + n };
    if (req.url === "/v1/embeddings") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ object: "list", data: [], usage: { prompt_tokens: 4, total_tokens: 4 } }));
      return;
    }
    if (!body.stream) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ choices: [{ message: { content: this.name } }], usage }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    let gone = false;
    res.on("close", () => {
      if (!res.writableFinished) {
        gone = true;
        this.hangUps++;
      }
    });
    const withUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage;
    for (let i = 0; i < n && !gone; i++) {
      res.write(
        `data: ${JSON.stringify({ choices: [{ delta: { content: `w${i}` } }], ...(withUsage ? { usage: null } : {}) })}\n\n`,
      );
      if (body.slow) await new Promise((r) => setTimeout(r, 20));
      // The next event only once the test has seen this one at the client (release()).
      if (body.lockstep) await new Promise<void>((r) => this.held.push(r));
    }
    if (gone) return;
    if (withUsage) res.write(`data: ${JSON.stringify({ choices: [], usage })}\n\n`);
    res.end("data: [DONE]\n\n");
  }
}

interface Ctx {
  e: EndpointHarness;
  gateway: InferenceGateway;
  /** The workspace's /v1 tokens this month, as the usage report counts them (the gateway's rows written first). */
  v1TokensThisMonth(): Promise<number>;
  base: string;
  models: { d: DeploymentWithStub }[];
  servers: ModelServer[];
}

async function start(suite: { after: (fn: () => unknown) => void }): Promise<Ctx> {
  const e = await startEndpointHarness(suite);
  const models: { d: DeploymentWithStub }[] = [];
  // The monthly token budget as main.ts wires it: the usage report's count, the queued rows written first.
  const usage = new UsageService({ repo: new UsageRepo(e.h.store.db) });
  let writeUsage = async () => {};
  const count = async (ws: string) => {
    await writeUsage();
    const now = Date.now();
    return usage.v1Tokens(ws, monthOf(now).fromMs, now);
  };
  const v1Tokens = new V1TokenBudget({ limits: e.h.store.limits, used: () => count });
  const gateway = createInference({
    endpoints: e.endpoints,
    activeDeployments: () => models.map((m) => m.d),
    repo: e.h.store.inference,
    workspaces: e.h.store.workspaces,
    deployments: e.h.store.deployments,
    // Read from the store at each request: the tests change limits between calls.
    limits: { get: (ws) => e.h.store.limits.get(ws), report: () => {}, v1Tokens },
    log: pino({ level: "silent" }),
  }).service;
  writeUsage = () => gateway.writeUsage();
  const app = Fastify();
  await app.register(inferenceRoutes(gateway));
  await app.listen({ host: "127.0.0.1", port: 0 });
  const servers: ModelServer[] = [];
  suite.after(async () => {
    await app.close();
    for (const s of servers) await s.stop();
  });
  return {
    e,
    gateway,
    v1TokensThisMonth: () => count(e.ws.id),
    base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
    models,
    servers,
  };
}

describe("the /v1 gateway", () => {
  const c = perSuite(start);
  let seq = 0;

  /** An asgi deployment serving `model`, with `containers` model servers (none: scaled to zero). */
  const deployModel = async (model: string, containers: number, config = {}) => {
    const r = await c.e.deploy(`m${++seq}`, "asgi", { config, extra: { served_models: [model] } });
    c.models.push({ d: modelDeployment(r) });
    const servers: ModelServer[] = [];
    for (let i = 0; i < containers; i++) servers.push(await addServer(r.stub.id, `ctr-${seq}-${i}`));
    return { stubId: r.stub.id, servers };
  };
  const addServer = async (stubId: string, id: string) => {
    const s = await new ModelServer(id).start();
    c.servers.push(s);
    c.e.tunnels.ports.set(id, s.port);
    c.e.containers.set(stubId, [
      ...c.e.containers.containersOf(stubId),
      { id, agentId: "agent-1", state: "running" },
    ]);
    return s;
  };
  const post = (
    path: string,
    body: unknown,
    headers: Record<string, string> = bearer(c.e.token),
    signal?: AbortSignal,
  ) =>
    fetch(`${c.base}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
      ...(signal ? { signal } : {}),
    });
  /** A chat request whose headers are sent and whose body never is: the answer it gets meanwhile. */
  const refusedBeforeBody = () =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(`${c.base}/v1/chat/completions`, {
        method: "POST",
        headers: { ...bearer(c.e.token), "content-type": "application/json", "content-length": "1000" },
      });
      req.on("error", reject);
      // Without an answer the request would wait for its body forever: a bound, not a timing.
      const stuck = setTimeout(() => {
        req.destroy();
        reject(new Error("no answer while the body was still outstanding"));
      }, 10_000);
      req.on("response", (res) => {
        clearTimeout(stuck);
        let body = "";
        res.on("data", (d: Buffer) => (body += d.toString()));
        res.on("end", () => {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body });
        });
      });
      req.flushHeaders();
    });
  const rows = async (): Promise<UsageRow[]> => c.e.h.store.inference.usage(c.e.ws.id, { limit: 1000 });

  test("a stream gets its usage chunk asked for and stripped; the server's counts are recorded", async () => {
    const { servers } = await deployModel("alpha", 1);
    const r = await post("/v1/chat/completions", {
      model: "alpha",
      stream: true,
      max_tokens: 4,
      messages: [],
    });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "text/event-stream");
    const text = await r.text();
    assert.equal(text.match(/"content"/g)?.length, 4);
    assert.doesNotMatch(text, /"choices":\[\]/, "no usage chunk for a client that did not ask");
    assert.match(text, /data: \[DONE\]/);
    const sent = servers[0]?.bodies[0] as { stream_options: unknown; _auth: unknown; _path: string };
    assert.deepEqual(sent.stream_options, { include_usage: true });
    assert.equal(sent._auth, null, "the caller's token never reaches the model server");
    assert.equal(sent._path, "/v1/chat/completions");
    await waitFor(async () => (await rows()).some((u) => u.model === "alpha"), { what: "the usage row" });
    const row = (await rows()).find((u) => u.model === "alpha") as UsageRow;
    assert.deepEqual([row.promptTokens, row.completionTokens, row.totalTokens, row.status], [5, 4, 9, 200]);
    assert.equal(row.stream, true);
    assert.ok(row.ttftMs !== null && row.ttftMs <= row.durationMs);

    const asked = await post("/v1/chat/completions", {
      model: "alpha",
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 2,
    });
    assert.match(await asked.text(), /"choices":\[\],"usage":\{"prompt_tokens":5/);
  });

  test("no buffering: each event reaches the client before the server writes the next one", {
    timeout: 60_000,
  }, async () => {
    const { servers } = await deployModel("lockstep", 1);
    const server = servers[0] as ModelServer;
    const r = await post("/v1/chat/completions", {
      model: "lockstep",
      stream: true,
      max_tokens: 3,
      lockstep: true,
      messages: [],
    });
    assert.equal(r.status, 200);
    const reader = (r.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = "";
    for (let i = 0; i < 3; i++) {
      // A gateway that held an event for more would leave this read waiting (the server waits too).
      while (!text.includes(`"w${i}"`)) {
        const { value, done } = await reader.read();
        assert.ok(!done, `the stream ended before event ${i}`);
        text += decoder.decode(value, { stream: true });
      }
      assert.ok(!text.includes(`"w${i + 1}"`), "the server has not written the next event yet");
      server.release();
    }
    for (let c = await reader.read(); !c.done; c = await reader.read())
      text += decoder.decode(c.value, { stream: true });
    assert.match(text, /data: \[DONE\]\n\n$/);
    assert.doesNotMatch(text, /"choices":\[\]/, "the usage chunk the gateway asked for is stripped");
  });

  test("GET /v1/models lists the workspace's models; a model id with a slash is retrieved whole", async () => {
    await deployModel("Org/Model-7B", 0);
    const list = await fetch(`${c.base}/v1/models`, { headers: bearer(c.e.token) });
    const ids = ((await list.json()) as { data: { id: string; owned_by: string }[] }).data.map((m) => m.id);
    assert.ok(ids.includes("Org/Model-7B") && ids.includes("alpha"), ids.join(","));
    const noToken = (await (await fetch(`${c.base}/v1/models`)).json()) as { data: unknown[] };
    assert.deepEqual(noToken.data, [], "no token: only the public catalog, empty here");
    const one = await fetch(`${c.base}/v1/models/Org/Model-7B`, { headers: bearer(c.e.token) });
    assert.equal(one.status, 200);
    assert.deepEqual(
      { ...((await one.json()) as Record<string, unknown>), created: 0 },
      { id: "Org/Model-7B", object: "model", created: 0, owned_by: "workspace", public: false },
    );
    const missing = await fetch(`${c.base}/v1/models/Org/none`, { headers: bearer(c.e.token) });
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as { error: { code: string } }).error.code, "model_not_found");
  });

  test("refusals have OpenAI's shape: no token, unknown model, bad JSON", async () => {
    const noToken = await post("/v1/embeddings", { model: "alpha", input: "x" }, {});
    assert.equal(noToken.status, 401);
    const b = (await noToken.json()) as { error: { type: string; code: string; message: string } };
    assert.deepEqual([b.error.type, b.error.code], ["authentication_error", "unauthenticated"]);
    const unknown = await post("/v1/chat/completions", { model: "nope", messages: [] });
    assert.equal(unknown.status, 404);
    assert.deepEqual(((await unknown.json()) as { error: { code: string } }).error.code, "model_not_found");
    const bad = await post("/v1/chat/completions", "{");
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { code: string } }).error.code, "invalid_json");
    const noModel = await post("/v1/embeddings", { input: "x" });
    assert.equal(noModel.status, 400);
    assert.match(((await noModel.json()) as { error: { message: string } }).error.message, /model/);
    const other = await post(
      "/v1/chat/completions",
      { model: "alpha", messages: [] },
      bearer(c.e.otherToken),
    );
    assert.equal(other.status, 404, "another workspace's model is not found");
  });

  test("scaled to zero: the request waits for a container; a full queue is 429 with Retry-After", async () => {
    const { stubId } = await deployModel("cold", 0, { max_pending_tasks: 1 });
    const waiting = post("/v1/embeddings", { model: "cold", input: "x" });
    await waitFor(() => c.e.endpoints.slots.waitingFor(stubId) === 1, { what: "the request to wait" });
    const full = await post("/v1/embeddings", { model: "cold", input: "y" });
    assert.equal(full.status, 429);
    assert.equal(full.headers.get("retry-after"), "1");
    assert.equal(((await full.json()) as { error: { type: string } }).error.type, "rate_limit_error");
    await addServer(stubId, "ctr-cold");
    const r = await waiting;
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens, 4);
  });

  test("a request no container takes before it expires is 504", async () => {
    await deployModel("never", 0, { task_policy: { max_retries: 0, timeout: 180, expires: "1" } });
    const r = await post("/v1/embeddings", { model: "never", input: "x" });
    assert.equal(r.status, 504);
    const b = (await r.json()) as { error: { code: string; type: string } };
    assert.deepEqual([b.error.code, b.error.type], ["task_expired", "service_unavailable_error"]);
  });

  test("a client that hangs up aborts the upstream request; its row says 499", async () => {
    const { servers } = await deployModel("long", 1);
    const ctl = new AbortController();
    const r = await post(
      "/v1/chat/completions",
      { model: "long", stream: true, slow: true, max_tokens: 100_000 },
      bearer(c.e.token),
      ctl.signal,
    );
    const reader = r.body?.getReader();
    await reader?.read();
    ctl.abort();
    await waitFor(() => servers[0]?.hangUps === 1, { what: "the model server to see the hang-up" });
    await waitFor(async () => (await rows()).some((u) => u.model === "long" && u.status === 499), {
      what: "the cancelled row",
    });
  });

  test("a session stays on its container while it has room; otherwise the least busy one serves", async () => {
    const { servers } = await deployModel("pair", 2, { workers: 1 });
    const served = async (headers: Record<string, string>) => {
      const r = await post(
        "/v1/chat/completions",
        { model: "pair", max_tokens: 1 },
        { ...bearer(c.e.token), ...headers },
      );
      return ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message
        .content;
    };
    const first = await served({ "x-session-id": "s1" });
    for (let i = 0; i < 4; i++) assert.equal(await served({ "x-session-id": "s1" }), first);
    // Its container busy (a held request): the session's next request goes to the other one.
    const busy = servers.find((s) => s.name === first) as ModelServer;
    const holding = post(
      "/v1/chat/completions",
      { model: "pair", max_tokens: 1, hold: true },
      {
        ...bearer(c.e.token),
        "x-session-id": "s1",
      },
    );
    await waitFor(() => busy.bodies.some((b) => b.hold), { what: "the held request" });
    assert.notEqual(await served({ "x-session-id": "s1" }), first);
    busy.release();
    await holding;
  });

  test("limits: requests in flight and tokens per minute answer 429 limit_exceeded", async () => {
    await deployModel("metered", 1);
    await c.e.h.store.limits.set(c.e.ws.id, { maxTokensPerMinute: 1 });
    try {
      // Tokens of earlier tests on this coordinator count: the window is over the limit already.
      const r = await post("/v1/embeddings", { model: "metered", input: "x" });
      assert.equal(r.status, 429);
      assert.ok(Number(r.headers.get("retry-after")) >= 1);
      const b = (await r.json()) as { error: { code: string; message: string } };
      assert.equal(b.error.code, "limit_exceeded");
      assert.match(b.error.message, /max_tokens_per_minute/);
      await c.e.h.store.limits.set(c.e.ws.id, { maxTokensPerMinute: null, maxInferenceRequests: 0 });
      const busy = await post("/v1/embeddings", { model: "metered", input: "x" });
      assert.equal(busy.status, 429);
      assert.match(
        ((await busy.json()) as { error: { message: string } }).error.message,
        /max_inference_requests/,
      );
      assert.equal(c.gateway.d.limiter.usage(c.e.ws.id).requests, 0, "a refused request holds nothing");
      // The limits need only the caller: a body still on its way is not waited for.
      const early = await refusedBeforeBody();
      assert.equal(early.status, 429);
      assert.match(early.body, /max_inference_requests/);
    } finally {
      await c.e.h.store.limits.set(c.e.ws.id, { maxTokensPerMinute: null, maxInferenceRequests: null });
    }
  });

  test("v1_tokens_per_month: once the month's tokens reach the budget /v1 answers 429 naming it; none lets requests through", async () => {
    await deployModel("budgeted", 1);
    const chat = { model: "budgeted", max_tokens: 3, messages: [] }; // 5 prompt + 3 completion tokens
    // Earlier tests' tokens count: the budget is what the month used so far plus a few requests.
    const before = await c.v1TokensThisMonth();
    const budget = before + 20;
    await c.e.h.store.limits.set(c.e.ws.id, { v1TokensPerMonth: budget });
    try {
      let recorded = before;
      let served = 0;
      while (recorded < budget) {
        const r = await post("/v1/chat/completions", chat);
        assert.equal(r.status, 200, await r.clone().text());
        await r.text();
        served++;
        const was = recorded;
        await waitFor(
          async () => {
            recorded = await c.v1TokensThisMonth();
            return recorded > was;
          },
          { what: "the usage row" },
        );
      }
      assert.equal(served, 3, "8 tokens a request: the third reaches the budget");
      assert.equal(recorded, budget + 4);
      const reset = new Date(monthOf(Date.now()).resetMs).toISOString();
      const refused = await post("/v1/chat/completions", chat);
      assert.equal(refused.status, 429);
      assert.ok(Number(refused.headers.get("retry-after")) >= 1);
      const b = (await refused.json()) as { error: { code: string; message: string; type: string } };
      assert.equal(b.error.code, "limit_exceeded");
      assert.equal(
        b.error.message,
        `the workspace used ${recorded} of its ${budget} /v1 tokens this month (limit v1_tokens_per_month): /v1 requests are refused until ${reset}`,
      );
      // A bot's in-process call takes the same check.
      const bot = await new InProcessInference(c.gateway).complete(c.e.ws.id, "chat.completions", chat);
      assert.equal(bot.status, 429);
      assert.match(bot.body.toString(), /limit v1_tokens_per_month/);
      const servedBefore = c.servers.reduce((n, s) => n + s.bodies.length, 0);
      await c.e.h.store.limits.set(c.e.ws.id, { v1TokensPerMonth: null });
      const through = await post("/v1/chat/completions", chat);
      assert.equal(through.status, 200);
      await through.text();
      assert.equal(
        c.servers.reduce((n, s) => n + s.bodies.length, 0),
        servedBefore + 1,
        "the refused requests never reached the model",
      );
    } finally {
      await c.e.h.store.limits.set(c.e.ws.id, { v1TokensPerMonth: null });
    }
  });
});
