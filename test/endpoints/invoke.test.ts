import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, request } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { describe, test } from "node:test";
import { waitFor } from "../../shared/net.ts";
import type { TaskStatus } from "../../shared/tasks.ts";
import { SPEC_TASK_FIELDS } from "../tasks/fixtures.ts";
import { perSuite } from "../helpers/suite.ts";
import { startEndpointHarness } from "./harness.ts";
import { bearer } from "../helpers/auth.ts";

const params = { names: ["a", "b"], required: ["a"], var_keyword: false, context: false };

describe("endpoint invocation (real task service, fake containers over local HTTP)", () => {
  const e = perSuite((suite) => startEndpointHarness(suite));

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${e.base}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer(e.token), ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  const statusOf = async (id: string) => (await e.h.tasks.getTask(e.ws.id, id)).status;
  const until = (id: string, s: TaskStatus) =>
    waitFor(async () => (await statusOf(id)) === s, { timeoutMs: 5000, what: `task ${id} to be ${s}` });

  test("round trip: the handler's JSON with X-Task-Id; the task is COMPLETE in the status API", async () => {
    const d = await e.deploy("hello", "endpoint", { extra: { handler_params: params } });
    const runner = await e.addContainer(d.stub.id, "ctr-hello");
    const res = await post("/endpoint/hello", { a: 1, b: "x" });
    assert.equal(res.status, 200);
    const taskId = res.headers.get("x-task-id") as string;
    assert.match(taskId, /^task-/);
    const body = (await res.json()) as { got: unknown; task_id: string };
    assert.deepEqual(body, { got: { a: 1, b: "x" }, task_id: taskId });
    const seen = runner.seen.at(-1);
    assert.equal(seen?.url, "/");
    assert.equal(seen?.headers["x-task-id"], taskId);
    assert.equal(seen?.headers.authorization, undefined, "berth's token is not handed to the app");
    assert.equal(seen?.headers["x-forwarded-prefix"], "/endpoint/hello");
    assert.equal(e.deployments.requests.get(d.deployment.id), 1);

    await until(taskId, "COMPLETE");
    const api = await fetch(`${e.base}/v2/task/${taskId}/`, {
      headers: bearer(e.token),
    });
    assert.equal(api.status, 200);
    const t = (await api.json()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(t).sort(), SPEC_TASK_FIELDS);
    assert.equal(t.status, "COMPLETE");
    assert.equal(t.container_id, "ctr-hello");
    assert.ok(t.started_at && t.ended_at);
    assert.equal((t.stub as { id: string }).id, d.stub.id);
    const row = await e.h.tasks.getTask(e.ws.id, taskId);
    assert.deepEqual(JSON.parse(row.resultJson as string), body);
    const hist = (await e.h.tasks.history(e.ws.id, taskId)).map((x) => x.status);
    assert.deepEqual(hist, ["RUNNING", "COMPLETE"]);
    // Versioned URL and by id reach the same deployment.
    assert.equal((await post("/endpoint/hello/v1", { a: 2 })).status, 200);
    assert.equal((await post(`/endpoint/id/${d.deployment.id}`, { a: 3 })).status, 200);
  });

  test("bodies are checked before any container: 400 names unknown and missing keys; 405; bad JSON", async () => {
    const d = await e.deploy("strict", "endpoint", { extra: { handler_params: params } });
    const runner = await e.addContainer(d.stub.id, "ctr-strict");
    const res = await post("/endpoint/strict", { b: 1, zzz: 2 });
    assert.equal(res.status, 400);
    const err = (await res.json()) as { error: { code: string; message: string; details: unknown } };
    assert.match(err.error.message, /'zzz'/);
    assert.match(err.error.message, /'a'/);
    assert.deepEqual(err.error.details, { unknown: ["zzz"], missing: ["a"] });
    assert.equal((await post("/endpoint/strict", "[1,2]")).status, 400);
    const bad = await post("/endpoint/strict", "{nope");
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { code: string } }).error.code, "invalid_json");
    const get = await fetch(`${e.base}/endpoint/strict`, { headers: bearer(e.token) });
    assert.equal(get.status, 405);
    assert.equal(get.headers.get("allow"), "POST");
    assert.equal(runner.seen.length, 0, "the container never saw a refused body");
  });

  test("auth and resolution: 401 without/with a bad token, 404 unknown or another workspace, 409 stopped, taskqueue hint", async () => {
    const d = await e.deploy("guarded", "endpoint");
    await e.addContainer(d.stub.id, "ctr-guarded");
    const noToken = await fetch(`${e.base}/endpoint/guarded`, { method: "POST", body: "{}" });
    assert.equal(noToken.status, 401);
    assert.equal((await post("/endpoint/guarded", {}, { authorization: "Bearer bt_wrong" })).status, 401);
    assert.equal(
      (await fetch(`${e.base}/endpoint/id/${d.deployment.id}`, { method: "POST", body: "{}" })).status,
      401,
    );
    assert.equal((await post(`/endpoint/id/${d.deployment.id}`, {}, bearer(e.otherToken))).status, 404);
    assert.equal((await post("/endpoint/guarded", {}, bearer(e.otherToken))).status, 404);
    assert.equal((await post("/endpoint/nothing-here", {})).status, 404);

    const pub = await e.deploy("public", "endpoint", { config: { authorized: false } });
    await e.addContainer(pub.stub.id, "ctr-public");
    const open = await fetch(`${e.base}/endpoint/id/${pub.deployment.id}`, { method: "POST", body: "{}" });
    assert.equal(open.status, 200);
    assert.equal((await fetch(`${e.base}/endpoint/public`, { method: "POST", body: "{}" })).status, 401);

    const paused = await e.deploy("paused", "endpoint", { active: false });
    const stopped = await post("/endpoint/paused", {});
    assert.equal(stopped.status, 409);
    assert.equal(((await stopped.json()) as { error: { code: string } }).error.code, "deployment_stopped");
    // By id, that it is stopped (and its name) is told only to its workspace (the route fuzzer found it told anyone).
    const byId = `/endpoint/id/${paused.deployment.id}`;
    assert.equal((await post(byId, {})).status, 409);
    const stranger = await post(byId, {}, bearer(e.otherToken));
    assert.equal(stranger.status, 404);
    assert.doesNotMatch(await stranger.text(), /paused/);
    assert.equal((await fetch(`${e.base}${byId}`, { method: "POST", body: "{}" })).status, 401);
    await e.deploy("jobs", "taskqueue");
    const tq = await post("/endpoint/jobs", {});
    assert.equal(tq.status, 404);
    assert.match(((await tq.json()) as { error: { message: string } }).error.message, /\/taskqueue\/jobs/);
  });

  test("a handler error is 500 {error, task_id} and the task FAILED", async () => {
    const d = await e.deploy("failing", "endpoint");
    await e.addContainer(d.stub.id, "ctr-failing");
    const res = await post("/endpoint/failing", { op: "fail" });
    assert.equal(res.status, 500);
    const body = (await res.json()) as { error: { type: string; message: string }; task_id: string };
    assert.equal(body.error.type, "ValueError");
    assert.equal(body.error.message, "boom");
    assert.equal(body.task_id, res.headers.get("x-task-id"));
    await until(body.task_id, "FAILED");
    const t = await e.h.tasks.getTask(e.ws.id, body.task_id);
    assert.equal(t.error?.type, "ValueError");
    assert.match(t.error?.traceback ?? "", /ValueError: boom/);
  });

  test("task timeout: 504 and TIMEOUT; the container's request is aborted", async () => {
    const d = await e.deploy("sleepy", "endpoint", {
      config: { task_policy: { max_retries: 0, timeout: 1, expires: "180" } },
    });
    const runner = await e.addContainer(d.stub.id, "ctr-sleepy");
    const res = await post("/endpoint/sleepy", { op: "hang" });
    assert.equal(res.status, 504);
    const id = res.headers.get("x-task-id") as string;
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, "task_timeout");
    await until(id, "TIMEOUT");
    await waitFor(() => runner.aborted === 1, { what: "the upstream request to be aborted" });
    assert.equal(e.endpoints.slots.inFlightOn("ctr-sleepy"), 0, "the slot is free again");
  });

  test("a caller that disconnects cancels its task and the container's request", async () => {
    const d = await e.deploy("abandoned", "endpoint");
    const runner = await e.addContainer(d.stub.id, "ctr-abandoned");
    const ac = new AbortController();
    const req = fetch(`${e.base}/endpoint/abandoned`, {
      method: "POST",
      headers: bearer(e.token),
      body: JSON.stringify({ op: "hang" }),
      signal: ac.signal,
    }).catch(() => undefined);
    await waitFor(() => runner.seen.length === 1, { what: "the request to reach the container" });
    const id = runner.seen[0]?.headers["x-task-id"] as string;
    await until(id, "RUNNING");
    ac.abort();
    await req;
    await until(id, "CANCELLED");
    await waitFor(() => runner.aborted === 1, { what: "the container's request to be aborted" });
    assert.equal(e.endpoints.slots.inFlightOn("ctr-abandoned"), 0);
  });

  test("a request that finds a free container is sent before its task is recorded; one that waits is recorded first", async () => {
    const d = await e.deploy("order", "endpoint");
    const order: string[] = [];
    const direct = e.h.tasks.direct;
    const record = direct.record.bind(direct);
    direct.record = (stub, info, o) => {
      order.push(`recorded ${info.id}`);
      record(stub, info, o);
    };
    try {
      // Every write of a request to the container's connection, by the request's task id.
      const agent = e.tunnels.httpAgent("agent-1", "ctr-order");
      const dial = agent.createConnection.bind(agent);
      agent.createConnection = (...args: Parameters<typeof dial>) => {
        const s = dial(...args) as Socket;
        const write = s.write.bind(s) as (...a: unknown[]) => boolean;
        s.write = ((chunk: unknown, ...rest: unknown[]) => {
          const id = /x-task-id: (task-\S+)\r\n/i.exec(String(chunk))?.[1];
          if (id) order.push(`sent ${id}`);
          return write(chunk, ...rest);
        }) as typeof s.write;
        return s;
      };

      // No container yet: the request waits, so it is recorded (and counted as demand) first.
      const waiting = post("/endpoint/order", { n: 1 });
      await waitFor(() => order.length === 1, { what: "the waiting request's task to be recorded" });
      await e.addContainer(d.stub.id, "ctr-order");
      const first = await waiting;
      assert.equal(first.status, 200);
      const firstId = first.headers.get("x-task-id") as string;
      assert.deepEqual(order, [`recorded ${firstId}`, `sent ${firstId}`]);

      // A free container: the request is on its way before its task is recorded.
      order.length = 0;
      const second = await post("/endpoint/order", { n: 2 });
      assert.equal(second.status, 200);
      const secondId = second.headers.get("x-task-id") as string;
      assert.deepEqual(order, [`sent ${secondId}`, `recorded ${secondId}`]);
      await until(secondId, "COMPLETE");
      const t = await e.h.tasks.getTask(e.ws.id, secondId);
      assert.equal(t.containerId, "ctr-order");
      assert.ok(t.startedAt && t.endedAt);
      const hist = (await e.h.tasks.history(e.ws.id, secondId)).map((x) => x.status);
      assert.deepEqual(hist, ["RUNNING", "COMPLETE"]);
    } finally {
      direct.record = record;
    }
  });

  test("a task that cannot be recorded: the caller gets 500, the slot and the queue place are given back", async () => {
    const d = await e.deploy("unrecorded", "endpoint", { config: { max_pending_tasks: 1 } });
    const direct = e.h.tasks.direct;
    const record = direct.record.bind(direct);
    let failures = 0;
    direct.record = () => {
      failures++;
      throw new Error("the live index is broken");
    };
    try {
      // Waiting (no container yet): refused before it waits; its max_pending_tasks place is free again.
      const waiting = await post("/endpoint/unrecorded", { n: 1 });
      assert.equal(waiting.status, 500);
      assert.equal(((await waiting.json()) as { error: { code: string } }).error.code, "internal");
      // A free container: the request went out first; it is cut off and the slot given back.
      const runner = await e.addContainer(d.stub.id, "ctr-unrecorded");
      const sent = await post("/endpoint/unrecorded", { op: "hang" });
      assert.equal(sent.status, 500);
      assert.equal(((await sent.json()) as { error: { code: string } }).error.code, "internal");
      assert.equal(failures, 2);
      // Cut off at once, the request may never have reached the runner's handler: none is left open there.
      await waitFor(() => runner.inFlight === 0, { what: "no request open at the container" });
      assert.equal(e.endpoints.slots.inFlightOn("ctr-unrecorded"), 0);
    } finally {
      direct.record = record;
    }
    const ok = await post("/endpoint/unrecorded", { n: 3 });
    assert.equal(ok.status, 200);
  });

  test("callback_url in the body: the callback carries the response as data and the x-task-* headers", async (t) => {
    const got: { headers: IncomingHttpHeaders; body: string }[] = [];
    const receiver = createServer((req, res) => {
      let b = "";
      req.on("data", (c) => (b += c));
      req.on("end", () => {
        got.push({ headers: req.headers, body: b });
        res.end("ok");
      });
    });
    await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
    t.after(() => new Promise((r) => receiver.close(r)));
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const d = await e.deploy("hooked", "endpoint", { extra: { handler_params: params } });
    const runner = await e.addContainer(d.stub.id, "ctr-hooked");
    const res = await post("/endpoint/hooked", { a: 7, callback_url: hook });
    assert.equal(res.status, 200);
    const id = res.headers.get("x-task-id") as string;
    const answer = await res.json();
    assert.equal(runner.seen.at(-1)?.headers["x-callback-url"], hook);
    const cb = await waitFor(() => got.find((g) => g.headers["x-task-id"] === id), { what: "the callback" });
    assert.equal(cb.headers["x-task-status"], "COMPLETE");
    assert.ok(cb.headers["x-task-signature"] && cb.headers["x-task-timestamp"]);
    assert.deepEqual(JSON.parse(cb.body), { data: answer });
  });

  test("asgi: any method and path, query and body pass through; no JSON check", async () => {
    const d = await e.deploy("web", "asgi");
    const runner = await e.addContainer(d.stub.id, "ctr-web");
    const res = await fetch(`${e.base}/endpoint/web/items/42?q=1`, {
      method: "PUT",
      headers: { ...bearer(e.token), "content-type": "text/plain" },
      body: "plain text",
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-app"), "asgi");
    assert.equal(await res.text(), "PUT /items/42?q=1 plain text");
    const id = res.headers.get("x-task-id") as string;
    await until(id, "COMPLETE");
    assert.equal(runner.seen.at(-1)?.headers["x-forwarded-prefix"], "/endpoint/web");
    const get = await fetch(`${e.base}/endpoint/web/page`, {
      headers: bearer(e.token),
    });
    assert.equal(get.status, 200);
    assert.match(await get.text(), /^GET \/page /);
  });

  test("websocket through the upgrade path: echo, one task RUNNING while open and COMPLETE after", async () => {
    const d = await e.deploy("live", "realtime");
    await e.addContainer(d.stub.id, "ctr-live");
    const { socket, headers } = await new Promise<{
      socket: import("node:net").Socket;
      headers: IncomingHttpHeaders;
    }>((resolve, reject) => {
      const req = request(`${e.base}/endpoint/live`, {
        headers: {
          connection: "Upgrade",
          upgrade: "websocket",
          ...bearer(e.token),
          "sec-websocket-version": "13",
          "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
      });
      req.on("upgrade", (res, socket) => resolve({ socket, headers: res.headers }));
      req.on("response", (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
      req.on("error", reject);
      req.end();
    });
    const id = headers["x-task-id"] as string;
    assert.match(id, /^task-/);
    await until(id, "RUNNING");
    const echoed = new Promise<string>((r) => socket.once("data", (c) => r(c.toString())));
    socket.write("ping");
    assert.equal(await echoed, "echo:ping");
    socket.destroy();
    await until(id, "COMPLETE");

    // Refusals are plain HTTP answers on the socket.
    const refused = await new Promise<number>((resolve, reject) => {
      const req = request(`${e.base}/endpoint/live`, {
        headers: { connection: "Upgrade", upgrade: "websocket" },
      });
      req.on("response", (res) => resolve(res.statusCode ?? 0));
      req.on("upgrade", () => reject(new Error("upgraded without a token")));
      req.on("error", reject);
      req.end();
    });
    assert.equal(refused, 401);
  });
});
