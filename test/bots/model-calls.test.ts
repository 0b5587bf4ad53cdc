// A transition's model call as the coordinator makes it (coordinator/bots/
// model-calls.ts): the container's op model.chat comes over NATS from its
// agent (the agent's own StateRelayClient, as the restricted agent user) to
// the relay router, and the bots' model calls ask the /v1 gateway in process
// (InProcessInference) — no token minted, no HTTP request to the coordinator
// — through the same request path as any client: the endpoints' request
// buffer over a real task service, a "model container" that is a local HTTP
// server behind the endpoint harness's tunnel, limits, and one usage row.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import pino from "pino";
import { StateRelayClient } from "../../agent/bridge/state-relay.ts";
import { BotModelCalls } from "../../coordinator/bots/model-calls.ts";
import { createInference } from "../../coordinator/inference/index.ts";
import { InProcessInference } from "../../coordinator/inference/in-process.ts";
import type { DeploymentWithStub } from "../../coordinator/deployments/store.ts";
import type { UsageRow } from "../../coordinator/inference/store.ts";
import { RelayRouter } from "../../coordinator/streams/relay-router.ts";
import { BerthError } from "../../shared/errors.ts";
import { waitFor } from "../../shared/net.ts";
import { type EndpointHarness, modelDeployment, startEndpointHarness } from "../endpoints/harness.ts";
import { perSuite } from "../helpers/suite.ts";

/** An OpenAI-style model server: answers its name and token counts; `hold` waits until the caller leaves. */
class ModelServer {
  readonly server: Server;
  readonly seen: { url: string; headers: IncomingMessage["headers"]; body: Record<string, unknown> }[] = [];
  hangUps = 0;

  constructor() {
    this.server = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>;
      this.seen.push({ url: req.url ?? "", headers: req.headers, body });
      if (body.hold) {
        res.on("close", () => this.hangUps++);
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          object: "chat.completion",
          choices: [{ message: { role: "assistant", content: "hello there" } }],
          usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
        }),
      );
    });
  }
}

async function start(suite: { after: (fn: () => unknown) => void }) {
  const e: EndpointHarness = await startEndpointHarness(suite);
  const models: DeploymentWithStub[] = [];
  const gateway = createInference({
    endpoints: e.endpoints,
    activeDeployments: () => models,
    repo: e.h.store.inference,
    workspaces: e.h.store.workspaces,
    deployments: e.h.store.deployments,
    // Read from the store at each request: the tests change limits between calls.
    limits: { get: (ws) => e.h.store.limits.get(ws), report: () => {} },
    log: pino({ level: "silent" }),
  }).service;
  const inference = new InProcessInference(gateway);
  const relay = new RelayRouter(e.h.nc, { error() {} });
  const calls = new BotModelCalls(inference);
  calls.serveOn(relay);
  relay.start();
  await e.h.nc.flush();
  const model = new ModelServer();
  await new Promise<void>((r) => model.server.listen(0, "127.0.0.1", r));
  suite.after(async () => {
    await relay.stop();
    model.server.closeAllConnections();
    await new Promise((r) => model.server.close(r));
  });
  // The coordinator's own HTTP server: a model call must not reach it.
  const coordinatorRequests: string[] = [];
  e.app.server.on("request", (req: IncomingMessage) => coordinatorRequests.push(req.url ?? ""));
  // An asgi deployment serving "tiny", one running container: the model server.
  const r = await e.deploy("tiny-model", "asgi", { extra: { served_models: ["tiny"] } });
  models.push(modelDeployment(r));
  e.tunnels.ports.set("ctr-tiny", (model.server.address() as AddressInfo).port);
  e.containers.set(r.stub.id, [{ id: "ctr-tiny", agentId: "agent-1", state: "running" }]);
  return {
    e,
    gateway,
    inference,
    calls,
    model,
    coordinatorRequests,
    agent: new StateRelayClient(e.h.agentNc, "agent-1"),
  };
}

describe("bots' model calls", () => {
  const c = perSuite(start);
  const rows = async (): Promise<UsageRow[]> => c.e.h.store.inference.usage(c.e.ws.id, { limit: 1000 });
  const tokenIds = async () => (await c.e.h.store.tokens.list(c.e.ws.id)).map((t) => t.id).sort();

  test("a container's model.chat reaches the model in process: no token, no HTTP to the coordinator, one usage row", async () => {
    const tokensBefore = await tokenIds();
    const answer = await c.agent.call(c.e.ws.id, {
      op: "model.chat",
      body: { model: "tiny", messages: [{ role: "user", content: "hi" }], user: "bs-1" },
    });
    const response = answer.response as { choices: { message: { content: string } }[] };
    assert.equal(response.choices[0]?.message.content, "hello there");
    const sent = c.model.seen.at(-1);
    assert.equal(sent?.url, "/v1/chat/completions", "the ASGI app gets the OpenAI path");
    assert.equal(sent?.body.stream, false);
    assert.equal(sent?.body.user, "bs-1");
    assert.equal(sent?.headers.authorization, undefined, "no token reaches the model server");
    assert.deepEqual(c.coordinatorRequests, [], "no HTTP request reached the coordinator");
    assert.deepEqual(await tokenIds(), tokensBefore, "no token was minted");
    await waitFor(async () => (await rows()).some((u) => u.model === "tiny"), { what: "the usage row" });
    const row = (await rows()).find((u) => u.model === "tiny") as UsageRow;
    assert.deepEqual(
      [row.route, row.status, row.errorCode, row.tokenId, row.stream],
      ["chat.completions", 200, null, null, false],
    );
    assert.deepEqual([row.promptTokens, row.completionTokens, row.totalTokens], [3, 2, 5]);
    assert.ok(row.taskId, "the request was a task of the model's deployment");
  });

  test("the gateway's refusals keep their code; a stream or a body that is no object is refused", async () => {
    await assert.rejects(
      c.calls.chat(c.e.ws.id, { model: "nope", messages: [] }),
      (e: unknown) =>
        e instanceof BerthError && e.code === "model_not_found" && /no model 'nope'/.test(e.message),
    );
    await assert.rejects(
      c.calls.chat(c.e.ws.id, { model: "tiny", stream: true }),
      (e: unknown) => e instanceof BerthError && e.code === "invalid_request",
    );
    await assert.rejects(c.calls.chat(c.e.ws.id, ["not", "an", "object"]), /chat completion request object/);
    // Over the relay the container reads the same code.
    await assert.rejects(
      c.agent.call(c.e.ws.id, { op: "model.chat", body: { model: "nope", messages: [] } }),
      (e: unknown) => e instanceof BerthError && e.code === "model_not_found",
    );
    await waitFor(async () => (await rows()).some((u) => u.model === "nope" && u.status === 404), {
      what: "the refused call's usage row",
    });
  });

  test("the workspace's inference limits apply to model calls", async () => {
    await c.e.h.store.limits.set(c.e.ws.id, { maxInferenceRequests: 0 });
    try {
      await assert.rejects(
        c.calls.chat(c.e.ws.id, { model: "tiny", messages: [] }),
        (e: unknown) =>
          e instanceof BerthError && e.code === "limit_exceeded" && /max_inference_requests/.test(e.message),
      );
    } finally {
      await c.e.h.store.limits.set(c.e.ws.id, { maxInferenceRequests: null });
    }
  });

  test("a call past its bound leaves like a caller: the model's request is aborted, the row says 499", async () => {
    const quick = new BotModelCalls(c.inference, 300);
    await assert.rejects(
      quick.chat(c.e.ws.id, { model: "tiny", messages: [], hold: true }),
      (e: unknown) => e instanceof BerthError && e.code === "unavailable" && /in time/.test(e.message),
    );
    await waitFor(() => c.model.hangUps === 1, { what: "the model server to see the caller leave" });
    await waitFor(async () => (await rows()).some((u) => u.model === "tiny" && u.status === 499), {
      what: "the cancelled row",
    });
  });
});
