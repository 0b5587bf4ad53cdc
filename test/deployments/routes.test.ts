// The deployment, gateway-deployment and task queue routes through inject(),
// over a real SQLite store, a real nats-server and the real task service:
// auth (401), workspace scoping (404), validation (400), stopped (409), the
// pending limit (429), and the JetStream messages the task queue routes queue.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import type { DeploymentService } from "../../coordinator/deployments/service.ts";
import { deploymentRoutes } from "../../coordinator/deployments/routes.ts";
import { gatewayScope, tokenScope } from "../../coordinator/http/scopes.ts";
import { gatewayDeploymentRoutes } from "../../coordinator/functions/deploy-routes.ts";
import { gatewayStubRoutes } from "../../coordinator/functions/stub-routes.ts";
import { gatewayEnqueueRoutes, taskQueueRoutes } from "../../coordinator/functions/taskqueue-routes.ts";
import { TASKS_STREAM, TaskHeaders } from "../../shared/tasks.ts";
import { startTaskHarness, type TaskHarness } from "../tasks/harness.ts";
import { deployInput, deploymentService } from "./helpers.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { bearer } from "../helpers/auth.ts";
import { whyStubNeverPlaceable } from "../../coordinator/scheduler/feasible.ts";
import { capacity, oneAgentFleet } from "../containers/fakes.ts";

// One 8-core agent with one A10G: the fleet berth deploy's placement warning looks at.
const fleet = oneAgentFleet("agent-a", capacity(8, 32, [{ type: "A10G", uuid: "GPU-1" }]));

/** The routes as coordinator/edge/app.ts registers them (same options and error mapping). */
async function deploymentApp(h: TaskHarness, deployments: DeploymentService): Promise<FastifyInstance> {
  const app = routesApp();
  const tokens = h.store.tokens;
  await app.register(
    gatewayScope(
      tokens,
      gatewayStubRoutes(h.tasks),
      gatewayDeploymentRoutes(deployments, (stub) => whyStubNeverPlaceable(fleet.list(), stub)),
      gatewayEnqueueRoutes({ tasks: h.tasks }),
    ),
  );
  await app.register(
    tokenScope(
      tokens,
      deploymentRoutes({
        deployments,
        tasks: h.tasks,
        containers: { activeContainers: (id) => h.counts.get(id) ?? 0 },
      }),
    ),
  );
  await app.register(taskQueueRoutes({ tokens, deployments, tasks: h.tasks }));
  return app;
}

describe("deployment routes (inject)", () => {
  let h: TaskHarness;
  let app: FastifyInstance;
  let svc: DeploymentService;
  let token: string;
  let otherToken: string;
  let wsExt: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    ({ service: svc } = deploymentService(h));
    await svc.open();
    cleanups.unshift(() => svc.close());
    app = await deploymentApp(h, svc);
    cleanups.unshift(() => app.close());
    token = (await h.store.tokens.create(h.ws.id)).secret;
    otherToken = (await h.store.tokens.create(h.otherWs.id)).secret;
    wsExt = h.ws.externalId;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const call = (
    method: "GET" | "POST" | "DELETE",
    url: string,
    payload?: unknown,
    t: string | null = token,
  ) =>
    app.inject({
      method,
      url,
      headers: t ? bearer(t) : {},
      ...(payload !== undefined ? { payload: payload as object } : {}),
    });
  const deploy = async (name: string, kind: string, o: Parameters<typeof deployInput>[2] = {}) => {
    const b = deployInput(name, kind, o);
    const r = await call("POST", "/api/v1/gateway/deployments", {
      name: b.name,
      type: b.kind,
      config: b.config,
      extra: b.extra,
      ...(b.serve ? { serve: true } : {}),
    });
    assert.equal(r.statusCode, 200, r.body);
    return r.json();
  };
  const jsMessage = async (taskId: string) => {
    const t = await h.tasks.getTask(h.ws.id, taskId);
    return (await h.nc.jetstreamManager()).streams.getMessage(TASKS_STREAM, { seq: t.streamSeq as number });
  };

  test("POST /gateway/deployments: a deployment no host can ever run is made, with a warning that says why", async () => {
    const body = (await deploy("gpu-web", "endpoint", { extra: { gpu_types: ["H200"], gpu_count: 1 } })) as {
      deployment: { name: string };
      warnings?: string[];
    };
    assert.equal(body.deployment.name, "gpu-web");
    assert.equal(body.warnings?.length, 1);
    assert.match(body.warnings?.[0] ?? "", /no host of this cluster can ever run gpu-web's containers/);
    assert.match(body.warnings?.[0] ?? "", /1 GPU\(s\) of type H200 \(fleet GPUs: 1xA10G\)/);
    const fits = await deploy("a10g-web", "endpoint", { extra: { gpu_types: ["A10G"], gpu_count: 1 } });
    assert.equal("warnings" in fits, false, "placeable: no warning");
  });

  test("POST /gateway/deployments: {ok, deployment} in the contract's shape; 401 without a token", async () => {
    const r = await deploy("web", "endpoint");
    assert.equal(r.ok, true);
    const d = r.deployment;
    assert.deepEqual(Object.keys(d).sort(), [
      "active",
      "created_at",
      "id",
      "last_request_at",
      "name",
      "serve",
      "stub_id",
      "type",
      "updated_at",
      "url",
      "version",
    ]);
    assert.deepEqual([d.name, d.version, d.type, d.active, d.serve], ["web", 1, "endpoint", true, false]);
    assert.equal(d.url, "http://coordinator.test:7070/endpoint/web/v1");
    const b = deployInput("web", "endpoint");
    const anon = await call("POST", "/api/v1/gateway/deployments", { ...b, type: "endpoint" }, null);
    assert.equal(anon.statusCode, 401);
  });

  test("POST /gateway/deployments: a bad cron, an unknown type or a missing code object is ok:false invalid_request naming it", async () => {
    const b = deployInput("cron", "schedule", { extra: { when: "0 0 30 2 *" } });
    const bad = await call("POST", "/api/v1/gateway/deployments", {
      name: b.name,
      type: "schedule",
      config: b.config,
      extra: b.extra,
    });
    assert.equal(bad.statusCode, 200);
    assert.equal(bad.json().ok, false);
    assert.equal(bad.json().error.code, "invalid_request");
    assert.match(bad.json().error.message, /day-of-month field "30": no selected month has such a day/);
    const kind = await call("POST", "/api/v1/gateway/deployments", {
      name: "k",
      type: "spaceship",
      config: b.config,
      extra: b.extra,
    });
    assert.match(kind.json().error.message, /unknown deployment type "spaceship"/);
    const code = await call("POST", "/api/v1/gateway/deployments", {
      name: "c",
      type: "function",
      config: b.config,
      extra: { ...b.extra, code_sha256: "b".repeat(64) },
    });
    assert.deepEqual([code.json().ok, code.json().error.code], [false, "invalid_request"]);
    assert.match(code.json().error.message, /code object b{64} not found/);
  });

  test("GET list (?name, newest first), details with containers, queue depth and events; url; 404 across workspaces", async () => {
    const v1 = (await deploy("listed", "taskqueue")).deployment;
    const v2 = (await deploy("listed", "taskqueue")).deployment;
    const list = await call("GET", `/api/v1/deployment/${wsExt}?name=listed`);
    assert.equal(list.statusCode, 200, list.body);
    assert.deepEqual(
      list.json().deployments.map((d: { id: string }) => d.id),
      [v2.id, v1.id],
    );
    assert.ok((await call("GET", `/api/v1/deployment/${wsExt}`)).json().deployments.length >= 3);

    h.counts.set(v2.stub_id, 2);
    await h.tasks.submit(h.ws.id, v2.stub_id, [Buffer.from("{}")], { payloadFormat: "json" });
    svc.recordScaling({
      stubId: v2.stub_id,
      workspaceId: h.ws.id,
      at: Date.now(),
      from: 0,
      to: 2,
      reason: "demand",
      queueDepth: 1,
    });
    const one = await call("GET", `/api/v1/deployment/${wsExt}/${v2.id}`);
    assert.equal(one.statusCode, 200, one.body);
    const body = one.json();
    assert.deepEqual([body.id, body.containers, body.queue_depth], [v2.id, 2, 1]);
    assert.deepEqual(
      body.events.map((e: { from: number; to: number; reason: string }) => [e.from, e.to, e.reason]),
      [[0, 2, "demand"]],
    );

    const url = await call("GET", `/api/v1/deployment/${v1.id}/url`);
    assert.deepEqual(url.json(), { url: "http://coordinator.test:7070/taskqueue/listed/v1" });

    // Another workspace: its token on our ids, or our token on its path.
    assert.equal(
      (await call("GET", `/api/v1/deployment/${wsExt}/${v2.id}`, undefined, otherToken)).statusCode,
      404,
    );
    assert.equal(
      (await call("GET", `/api/v1/deployment/${v1.id}/url`, undefined, otherToken)).statusCode,
      404,
    );
    assert.equal((await call("GET", `/api/v1/deployment/${h.otherWs.externalId}`)).statusCode, 404);
    assert.equal((await call("GET", `/api/v1/deployment/${wsExt}/dep-nope`)).statusCode, 404);
    assert.equal((await call("GET", `/api/v1/deployment/${wsExt}`, undefined, null)).statusCode, 401);
    assert.equal(
      (await call("GET", `/api/v1/deployment/${wsExt}`, undefined, "bt_wrong")).json().error.code,
      "unauthenticated",
    );
  });

  test("stop, start (the record), DELETE 204; another workspace's token gets 404 and changes nothing", async () => {
    const d = (await deploy("cycle", "endpoint")).deployment;
    const foreign = await call(
      "POST",
      `/api/v1/deployment/${h.otherWs.externalId}/stop/${d.id}`,
      undefined,
      otherToken,
    );
    assert.equal(foreign.statusCode, 404);
    assert.equal((await svc.get(h.ws.id, d.id)).active, true);
    const stopped = await call("POST", `/api/v1/deployment/${wsExt}/stop/${d.id}`);
    assert.equal(stopped.statusCode, 200, stopped.body);
    assert.equal(stopped.json().active, false);
    const started = await call("POST", `/api/v1/deployment/${wsExt}/start/${d.id}`);
    assert.equal(started.json().active, true);
    assert.equal(
      (await call("DELETE", `/api/v1/deployment/${wsExt}/${d.id}`, undefined, otherToken)).statusCode,
      404,
    );
    const del = await call("DELETE", `/api/v1/deployment/${wsExt}/${d.id}`);
    assert.equal(del.statusCode, 204);
    assert.equal(del.body, "");
    assert.equal((await call("GET", `/api/v1/deployment/${wsExt}/${d.id}`)).statusCode, 404);
    assert.equal((await call("POST", `/api/v1/deployment/${wsExt}/start/${d.id}`)).statusCode, 404);
  });

  test("POST /taskqueue/{name}: 200 {task_id} + X-Task-Id; the message is the JSON body with the JSON payload header", async () => {
    const d = (await deploy("jobs", "taskqueue")).deployment;
    const r = await call("POST", "/taskqueue/jobs", {
      x: 1,
      y: [2, 3],
      callback_url: "http://127.0.0.1:9/cb",
    });
    assert.equal(r.statusCode, 200, r.body);
    const taskId = r.json().task_id;
    assert.match(taskId, /^task-/);
    assert.equal(r.headers["x-task-id"], taskId);
    const m = await jsMessage(taskId);
    assert.equal(m.subject, `berth.tasks.${d.stub_id}`);
    assert.deepEqual(JSON.parse(Buffer.from(m.data).toString()), {
      x: 1,
      y: [2, 3],
      callback_url: "http://127.0.0.1:9/cb",
    });
    assert.equal(m.header.get(TaskHeaders.payloadFormat), "json");
    assert.equal(m.header.get(TaskHeaders.callbackUrl), "http://127.0.0.1:9/cb");
    // `curl -d` without a Content-Type still reads as JSON.
    const form = await app.inject({
      method: "POST",
      url: "/taskqueue/jobs/v1",
      headers: { ...bearer(token), "content-type": "application/x-www-form-urlencoded" },
      payload: '{"x": "form"}',
    });
    assert.equal(form.statusCode, 200, form.body);
    assert.deepEqual(JSON.parse(Buffer.from((await jsMessage(form.json().task_id)).data).toString()), {
      x: "form",
    });
  });

  test("POST /taskqueue: 400 for a non-object body or keys that do not bind (naming them), 401, 404, 409", async () => {
    await deploy("strict", "taskqueue");
    const bad = await call("POST", "/taskqueue/strict", [1, 2]);
    assert.equal(bad.statusCode, 400);
    assert.match(bad.json().error.message, /must be a JSON object.*got an array/);
    const keys = await call("POST", "/taskqueue/strict", { y: 1, z: 2, w: 3 });
    assert.equal(keys.statusCode, 400);
    assert.equal(
      keys.json().error.message,
      "the handler does not accept the keys 'z', 'w' and needs the key 'x'",
    );
    assert.deepEqual(keys.json().error.details, { unknown: ["z", "w"], missing: ["x"] });
    const notJson = await app.inject({
      method: "POST",
      url: "/taskqueue/strict",
      headers: { ...bearer(token), "content-type": "text/plain" },
      payload: "{nope",
    });
    assert.equal(notJson.statusCode, 400);
    assert.equal(notJson.json().error.code, "invalid_json");
    assert.equal((await call("POST", "/taskqueue/strict", { x: 1 }, null)).statusCode, 401);
    assert.equal((await call("POST", "/taskqueue/strict", { x: 1 }, otherToken)).statusCode, 404);
    assert.equal((await call("POST", "/taskqueue/strict/v9", { x: 1 })).statusCode, 404);
    assert.equal((await call("POST", "/taskqueue/strict/latest", { x: 1 })).statusCode, 404);
    await deploy("web-only", "endpoint");
    const wrongKind = await call("POST", "/taskqueue/web-only", { x: 1 });
    assert.equal(wrongKind.statusCode, 404);
    assert.match(wrongKind.json().error.message, /is a endpoint, not a task queue/);
    const v2 = (await deploy("strict", "taskqueue")).deployment;
    await call("POST", `/api/v1/deployment/${wsExt}/stop/${v2.id}`);
    const stopped = await call("POST", "/taskqueue/strict/v2", { x: 1 });
    assert.equal(stopped.statusCode, 409);
    assert.equal(stopped.json().error.code, "deployment_stopped");
    assert.equal(
      (await call("POST", "/taskqueue/strict", { x: 1 })).statusCode,
      200,
      "v1 still answers the name",
    );
  });

  test("POST /taskqueue: 429 once max_pending_tasks tasks wait", async () => {
    await deploy("small", "taskqueue", { config: { max_pending_tasks: 2 } });
    for (let i = 0; i < 2; i++)
      assert.equal((await call("POST", "/taskqueue/small", { x: i })).statusCode, 200);
    const full = await call("POST", "/taskqueue/small", { x: 3 });
    assert.equal(full.statusCode, 429);
    assert.equal(full.json().error.code, "resource_exhausted");
    assert.match(full.json().error.message, /2 tasks waiting, its max_pending_tasks is 2/);
  });

  test("POST /taskqueue/id/{id}: open when authorized=false, else the workspace's token only", async () => {
    const open = (await deploy("public", "taskqueue", { config: { authorized: false } })).deployment;
    assert.equal(open.url, `http://coordinator.test:7070/taskqueue/id/${open.id}`);
    const anon = await call("POST", `/taskqueue/id/${open.id}`, { x: "anyone" }, null);
    assert.equal(anon.statusCode, 200, anon.body);
    assert.equal(anon.headers["x-task-id"], anon.json().task_id);
    const closed = (await deploy("private", "taskqueue")).deployment;
    assert.equal((await call("POST", `/taskqueue/id/${closed.id}`, { x: 1 }, null)).statusCode, 401);
    assert.equal((await call("POST", `/taskqueue/id/${closed.id}`, { x: 1 }, otherToken)).statusCode, 404);
    assert.equal((await call("POST", `/taskqueue/id/${closed.id}`, { x: 1 })).statusCode, 200);
    assert.equal((await call("POST", "/taskqueue/id/dep-nope", { x: 1 })).statusCode, 404);
    // Stopped: its workspace hears so (409); anyone else gets what an unknown id gets (the route fuzzer found a 409 naming it).
    assert.equal((await call("POST", `/api/v1/deployment/${wsExt}/stop/${closed.id}`)).statusCode, 200);
    assert.equal((await call("POST", `/taskqueue/id/${closed.id}`, { x: 1 })).statusCode, 409);
    const stranger = await call("POST", `/taskqueue/id/${closed.id}`, { x: 1 }, otherToken);
    assert.equal(stranger.statusCode, 404);
    assert.doesNotMatch(stranger.body, /private/);
    assert.equal((await call("POST", `/taskqueue/id/${closed.id}`, { x: 1 }, null)).statusCode, 401);
  });

  test("POST /gateway/stubs/{stubId}/enqueue (TaskQueue.put): the pickled payload, no JSON header; task queues only", async () => {
    const b = deployInput("put-queue", "taskqueue");
    const stub = (
      await call("POST", "/api/v1/gateway/stubs", {
        name: "put-queue",
        type: "taskqueue",
        config: b.config,
        extra: b.extra,
      })
    ).json().stub;
    const pickled = Buffer.from([0x80, 0x05, 0x95, 0x01, 0x02, 0x2e]);
    const r = await call("POST", `/api/v1/gateway/stubs/${stub.id}/enqueue`, {
      args: pickled.toString("base64"),
    });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json().ok, true);
    const m = await jsMessage(r.json().task_id);
    assert.deepEqual(Buffer.from(m.data), pickled);
    assert.equal(m.header.has(TaskHeaders.payloadFormat), false);

    const fn = (
      await call("POST", "/api/v1/gateway/stubs", {
        name: "fn",
        type: "function",
        config: b.config,
        extra: b.extra,
      })
    ).json().stub;
    const notQueue = await call("POST", `/api/v1/gateway/stubs/${fn.id}/enqueue`, { args: "" });
    assert.deepEqual(
      [notQueue.statusCode, notQueue.json().ok, notQueue.json().error.code],
      [200, false, "invalid_request"],
    );
    const foreign = await call("POST", `/api/v1/gateway/stubs/${stub.id}/enqueue`, { args: "" }, otherToken);
    assert.equal(foreign.json().error.code, "not_found");
    assert.equal(
      (await call("POST", `/api/v1/gateway/stubs/${stub.id}/enqueue`, { args: "" }, null)).statusCode,
      401,
    );
  });
});
