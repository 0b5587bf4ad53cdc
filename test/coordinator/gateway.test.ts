import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { request } from "node:http";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { waitFor } from "../../shared/net.ts";
import { MAX_TASK_ARGS_BYTES } from "../../shared/tasks.ts";
import { SPEC_TASK_FIELDS } from "../tasks/fixtures.ts";
import { startTaskApp, startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "../tasks/harness.ts";
import { bearer } from "../helpers/auth.ts";

describe("gateway and task status routes (inject and a real socket, real NATS)", () => {
  let h: TaskHarness;
  let app: FastifyInstance;
  let admin: string;
  let user: string;
  let other: string;
  let port: number;
  let stubId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    app = await startTaskApp(h, cleanups);
    port = (app.server.address() as { port: number }).port;
    admin = (await h.store.tokens.create(h.ws.id, { admin: true })).secret;
    user = (await h.store.tokens.create(h.ws.id)).secret;
    other = (await h.store.tokens.create(h.otherWs.id)).secret;
    const r = await app.inject({
      method: "POST",
      url: "/api/v1/gateway/stubs",
      headers: bearer(user),
      payload: { name: "square", type: "function", config: stubConfig(), extra: stubExtra() },
    });
    stubId = r.json().stub.id;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const b64 = (s: string) => Buffer.from(s).toString("base64");
  const submit = async (token: string, payload: Record<string, unknown>, sid = stubId) =>
    (
      await app.inject({
        method: "POST",
        url: `/api/v1/gateway/stubs/${sid}/tasks`,
        headers: bearer(token),
        payload,
      })
    ).json();

  test("gateway: 401 stays 401; other failures are 200 with ok:false and a catalog code", async () => {
    const r = await app.inject({ method: "GET", url: `/api/v1/gateway/objects/${"a".repeat(64)}` });
    assert.equal(r.statusCode, 401);
    assert.equal(r.json().ok, false);
    assert.equal(r.json().error.code, "unauthenticated");
    const bad = await app.inject({
      method: "GET",
      url: "/api/v1/gateway/objects/nothex",
      headers: bearer(user),
    });
    assert.equal(bad.statusCode, 200);
    assert.deepEqual(Object.keys(bad.json()).sort(), ["error", "ok"]);
    assert.equal(bad.json().error.code, "invalid_request");
    const badStub = await app.inject({
      method: "POST",
      url: "/api/v1/gateway/stubs",
      headers: bearer(user),
      payload: { name: "x", type: "nope", config: stubConfig(), extra: stubExtra() },
    });
    assert.equal(badStub.statusCode, 200);
    assert.equal(badStub.json().error.code, "invalid_request");
  });

  test("stubs: isolation gvisor is kept in the stub's extra; another value is refused", async () => {
    const register = (isolation: string) =>
      app.inject({
        method: "POST",
        url: "/api/v1/gateway/stubs",
        headers: bearer(user),
        payload: {
          name: `iso-${isolation}`,
          type: "function",
          config: stubConfig(),
          extra: { ...stubExtra(), isolation },
        },
      });
    const ok = (await register("gvisor")).json();
    assert.equal(ok.ok, true);
    assert.equal((await h.store.stubs.get(ok.stub.id))?.extra.isolation, "gvisor");
    const bad = (await register("runsc")).json();
    assert.deepEqual([bad.ok, bad.error.code], [false, "invalid_request"]);
  });

  test("stubs: priority and preemptible are kept in the extra; a preemptible pod or a priority past 1000 is refused", async () => {
    const register = (name: string, type: string, extra: Record<string, unknown>) =>
      app.inject({
        method: "POST",
        url: "/api/v1/gateway/stubs",
        headers: bearer(user),
        payload: {
          name,
          type,
          config: type === "pod" ? { ...stubConfig(), handler: "" } : stubConfig(),
          extra: { ...stubExtra(), ...extra },
        },
      });
    const ok = (await register("batch", "function", { priority: -5, preemptible: true })).json();
    assert.equal(ok.ok, true);
    const stored = await h.store.stubs.get(ok.stub.id);
    assert.deepEqual([stored?.extra.priority, stored?.extra.preemptible], [-5, true]);
    const pod = (await register("p", "pod", { preemptible: true })).json();
    assert.deepEqual([pod.ok, pod.error.code], [false, "invalid_request"]);
    assert.match(pod.error.message, /a pod is never preempted/);
    assert.equal((await register("p2", "pod", { priority: 9 })).json().ok, true);
    const high = (await register("h", "function", { priority: 1001 })).json();
    assert.deepEqual([high.ok, high.error.code], [false, "invalid_request"]);
  });

  test("stubs: nodes is kept for functions, task queues and pods; other types and more than one task per gang are refused", async () => {
    const register = (name: string, type: string, extra: Record<string, unknown>, config = {}) =>
      app.inject({
        method: "POST",
        url: "/api/v1/gateway/stubs",
        headers: bearer(user),
        payload: {
          name,
          type,
          config: { ...(type === "pod" ? { ...stubConfig(), handler: "" } : stubConfig()), ...config },
          extra: { ...stubExtra(), ...extra },
        },
      });
    for (const type of ["function", "taskqueue/serve", "pod"]) {
      const ok = (await register(`gang-${type}`, type, { nodes: 2 })).json();
      assert.equal(ok.ok, true, JSON.stringify(ok));
      assert.equal((await h.store.stubs.get(ok.stub.id))?.extra.nodes, 2);
    }
    // One node is no gang: any type may say it.
    assert.equal((await register("one", "endpoint", { nodes: 1 })).json().ok, true);
    const refused = async (r: ReturnType<typeof register>, field: string, message: RegExp) => {
      const body = (await r).json();
      assert.deepEqual([body.ok, body.error.code], [false, "invalid_request"]);
      assert.match(body.error.message, message);
      assert.match(JSON.stringify(body.error), new RegExp(field.replace(/\./g, "\\.")));
    };
    await refused(register("e", "endpoint", { nodes: 2 }), "extra.nodes", /endpoint stub cannot be a gang/);
    await refused(register("s", "sandbox", { nodes: 2 }), "extra.nodes", /sandbox stub cannot be a gang/);
    await refused(
      register(
        "tpc",
        "function/serve",
        { nodes: 2 },
        {
          autoscaler: { type: "queue_depth", max_containers: 2, tasks_per_container: 4 },
        },
      ),
      "config.autoscaler.tasks_per_container",
      /a gang of 2 nodes runs one task at a time; config.autoscaler.tasks_per_container must be 1, got 4/,
    );
    await refused(
      register("cr", "function", { nodes: 2, concurrent_requests: 3 }),
      "extra.concurrent_requests",
      /extra.concurrent_requests must be 1, got 3/,
    );
    await refused(
      register("w", "function", { nodes: 2 }, { workers: 2 }),
      "config.workers",
      /config.workers must be 1/,
    );
    // The schema's bounds: 1..MAX_GANG_NODES.
    for (const nodes of [0, 65, 1.5]) {
      const body = (await register("bad", "function", { nodes })).json();
      assert.deepEqual([body.ok, body.error.code], [false, "invalid_request"], JSON.stringify(body));
    }
  });

  test("objects: absent, upload with hash check, present, invisible to another workspace", async () => {
    const bytes = Buffer.from("code archive bytes");
    const sha = createHash("sha256").update(bytes).digest("hex");
    const url = `/api/v1/gateway/objects/${sha}`;
    assert.deepEqual((await app.inject({ method: "GET", url, headers: bearer(user) })).json(), {
      ok: true,
      exists: false,
    });
    const octet = { ...bearer(user), "content-type": "application/octet-stream" };
    const wrong = await app.inject({
      method: "PUT",
      url,
      headers: octet,
      payload: Buffer.from("other bytes"),
    });
    assert.equal(wrong.statusCode, 200);
    assert.equal(wrong.json().error.code, "object_hash_mismatch");
    const put = await app.inject({ method: "PUT", url, headers: octet, payload: bytes });
    assert.equal(put.json().ok, true);
    const id = put.json().object_id;
    assert.ok(Number.isInteger(id));
    assert.deepEqual((await app.inject({ method: "GET", url, headers: bearer(user) })).json(), {
      ok: true,
      exists: true,
      object_id: id,
    });
    assert.equal((await app.inject({ method: "GET", url, headers: bearer(other) })).json().exists, false);
    assert.equal((await h.objects.open(sha)).read !== undefined, true);
    const s = await app.inject({
      method: "POST",
      url: "/api/v1/gateway/stubs",
      headers: bearer(user),
      payload: {
        name: "with-code",
        type: "function",
        config: stubConfig(),
        extra: stubExtra({ code_sha256: sha }),
      },
    });
    assert.equal(s.json().stub.object_id, id);
    const foreign = await app.inject({
      method: "POST",
      url: "/api/v1/gateway/stubs",
      headers: bearer(other),
      payload: {
        name: "with-code",
        type: "function",
        config: stubConfig(),
        extra: stubExtra({ code_sha256: sha }),
      },
    });
    assert.equal(foreign.json().error.code, "not_found", "another workspace's object is not usable");
  });

  test("stubs: get-or-create answers the same id; another workspace's stub is not_found", async () => {
    const r = await app.inject({
      method: "POST",
      url: "/api/v1/gateway/stubs",
      headers: bearer(user),
      payload: { name: "square", type: "function", config: stubConfig(), extra: stubExtra() },
    });
    assert.deepEqual(Object.keys(r.json().stub).sort(), [
      "config_version",
      "created_at",
      "id",
      "name",
      "object_id",
      "type",
      "updated_at",
    ]);
    assert.equal(r.json().stub.id, stubId);
    const g = await app.inject({
      method: "GET",
      url: `/api/v1/gateway/stubs/${stubId}`,
      headers: bearer(user),
    });
    assert.equal(g.json().stub.name, "square");
    const o = await app.inject({
      method: "GET",
      url: `/api/v1/gateway/stubs/${stubId}`,
      headers: bearer(other),
    });
    assert.equal(o.statusCode, 200);
    assert.equal(o.json().error.code, "not_found");
  });

  test("tasks: submit, result (with and without wait), cancel; limits and workspaces", async () => {
    const r = await submit(user, { inputs: [b64("a"), b64("b")] });
    assert.equal(r.ok, true);
    assert.equal(r.task_ids.length, 2);
    const [a, b] = r.task_ids as string[];
    const res = (id: string, q = "", token = user) =>
      app.inject({ method: "GET", url: `/api/v1/gateway/tasks/${id}/result${q}`, headers: bearer(token) });
    assert.deepEqual((await res(a as string)).json(), { ok: true, task_id: a, status: "PENDING" });
    assert.equal((await res(a as string, "?wait=1&timeout_s=0.1")).json().status, "PENDING");
    const waiting = res(a as string, "?wait=1&timeout_s=10");
    await h.event({ type: "started", taskId: a as string, stubId });
    await h.event({ type: "finished", taskId: a as string, stubId, status: "COMPLETE", result: b64("r") });
    assert.deepEqual((await waiting).json(), { ok: true, task_id: a, status: "COMPLETE", result: b64("r") });
    assert.equal((await res(a as string, "", other)).json().error.code, "not_found");
    const cancelUrl = `/api/v1/gateway/tasks/${b}/cancel`;
    assert.equal(
      (await app.inject({ method: "POST", url: cancelUrl, headers: bearer(other) })).json().error.code,
      "not_found",
    );
    const c = await app.inject({ method: "POST", url: cancelUrl, headers: bearer(user) });
    assert.deepEqual(c.json(), { ok: true, task_id: b, status: "CANCELLED" });
    const cancelled = (await res(b as string)).json();
    assert.equal(cancelled.error.type, "TaskCancelled");
    const big = Buffer.alloc(MAX_TASK_ARGS_BYTES + 1).toString("base64");
    const tooBig = await submit(user, { inputs: [b64("ok"), big] });
    assert.equal(tooBig.ok, false);
    assert.equal(tooBig.error.code, "task_args_too_large");
    assert.match(tooBig.error.message, /input 1.*4 MiB/);
    assert.equal((await submit(other, { inputs: [b64("x")] })).error.code, "not_found");
    assert.equal((await submit(user, { inputs: [] })).error.code, "invalid_request");
  });

  test("GET /v2/task/{id}/ answers exactly the spec's Task fields; 404 for another workspace", async () => {
    h.counts.set(stubId, 2);
    const [id] = (await submit(user, { inputs: [b64("v2")] })).task_ids as string[];
    const r = await app.inject({ method: "GET", url: `/v2/task/${id}/`, headers: bearer(user) });
    assert.equal(r.statusCode, 200);
    const t = r.json();
    assert.deepEqual(Object.keys(t).sort(), SPEC_TASK_FIELDS);
    assert.equal(t.id, id);
    assert.equal(t.status, "PENDING");
    assert.equal(t.started_at, null);
    assert.equal(t.ended_at, null);
    assert.equal(t.container_id, "");
    assert.ok(!Number.isNaN(Date.parse(t.created_at)) && t.created_at.endsWith("Z"));
    assert.ok(!Number.isNaN(Date.parse(t.updated_at)));
    assert.deepEqual(t.outputs, []);
    assert.equal(t.stats.active_containers, 2);
    assert.ok(t.stats.queue_depth >= 1);
    assert.deepEqual(Object.keys(t.stub).sort(), [
      "config",
      "config_version",
      "created_at",
      "id",
      "name",
      "object_id",
      "type",
      "updated_at",
    ]);
    assert.equal(typeof t.stub.config, "string");
    // The config as it holds for this task's container: cpu in millicores (docs/api.md, "stub.config").
    const registered = stubConfig();
    assert.deepEqual(JSON.parse(t.stub.config), {
      ...registered,
      runtime: { ...registered.runtime, cpu: 1000 },
    });
    assert.equal(t.stub.id, stubId);
    assert.equal(t.stub.type, "function");
    assert.equal(t.stub.config_version, 1);
    const noSlash = await app.inject({ method: "GET", url: `/v2/task/${id}`, headers: bearer(user) });
    assert.equal(noSlash.json().id, id);
    await h.event({ type: "started", taskId: id as string, stubId, containerId: "ctr-v2" });
    await waitFor(
      async () =>
        (await app.inject({ method: "GET", url: `/v2/task/${id}/`, headers: bearer(user) })).json()
          .started_at,
    );
    const running = (
      await app.inject({ method: "GET", url: `/v2/task/${id}/`, headers: bearer(user) })
    ).json();
    assert.equal(running.status, "RUNNING");
    assert.equal(running.container_id, "ctr-v2");
    const o = await app.inject({ method: "GET", url: `/v2/task/${id}/`, headers: bearer(other) });
    assert.equal(o.statusCode, 404);
    assert.equal(o.json().error.code, "not_found");
    assert.equal(
      (await app.inject({ method: "GET", url: "/v2/task/task-nope/", headers: bearer(user) })).statusCode,
      404,
    );
    assert.equal((await app.inject({ method: "GET", url: `/v2/task/${id}/` })).statusCode, 401);
  });

  test("GET /api/v1/task/{ws}/{id} adds the history, where a retry shows; a wrong ws is 404", async () => {
    const [id] = (await submit(user, { inputs: [b64("h")] })).task_ids as string[];
    await h.event({ type: "started", taskId: id as string, stubId, attempt: 1 });
    await h.event({ type: "retry", taskId: id as string, stubId, attempt: 1, reason: "container_exited" });
    await h.event({ type: "started", taskId: id as string, stubId, attempt: 2 });
    await h.event({
      type: "finished",
      taskId: id as string,
      stubId,
      attempt: 2,
      status: "COMPLETE",
      result: b64("x"),
    });
    const url = `/api/v1/task/${h.ws.externalId}/${id}`;
    const r = await waitFor(async () => {
      const j = (await app.inject({ method: "GET", url, headers: bearer(user) })).json();
      return j.history?.length === 4 ? j : undefined;
    });
    assert.deepEqual(
      r.history.map((e: { status: string; attempt: number }) => `${e.status}/${e.attempt}`),
      ["RUNNING/1", "RETRY/1", "RUNNING/2", "COMPLETE/2"],
    );
    assert.equal(r.history[1].reason, "container_exited");
    assert.equal(r.status, "COMPLETE");
    assert.ok(r.ended_at);
    const wrongWs = await app.inject({
      method: "GET",
      url: `/api/v1/task/${h.otherWs.externalId}/${id}`,
      headers: bearer(user),
    });
    assert.equal(wrongWs.statusCode, 404);
    const otherToken = await app.inject({
      method: "GET",
      url: `/api/v1/task/${h.otherWs.externalId}/${id}`,
      headers: bearer(other),
    });
    assert.equal(otherToken.statusCode, 404);
  });

  test("signature token: admin tokens only, stable across calls", async () => {
    const url = "/api/v1/workspace/current/signature-token";
    const a = await app.inject({ method: "GET", url, headers: bearer(admin) });
    assert.equal(a.statusCode, 200);
    assert.ok(a.json().signature_token.length > 20);
    assert.equal(
      (await app.inject({ method: "GET", url, headers: bearer(admin) })).json().signature_token,
      a.json().signature_token,
    );
    const u = await app.inject({ method: "GET", url, headers: bearer(user) });
    assert.equal(u.statusCode, 403);
    assert.equal(u.json().error.code, "permission_denied");
  });

  /** Opens a streamed submission over a real socket; lines arrive as they are written. */
  function openStream(payload: Record<string, unknown>) {
    const lines: Record<string, unknown>[] = [];
    let contentType = "";
    let ended = false;
    const req = request({
      host: "127.0.0.1",
      port,
      method: "POST",
      path: `/api/v1/gateway/stubs/${stubId}/tasks`,
      headers: { ...bearer(user), "content-type": "application/json" },
    });
    req.on("response", (res) => {
      contentType = String(res.headers["content-type"]);
      const rl = createInterface({ input: res });
      rl.on("line", (l) => lines.push(JSON.parse(l)));
      rl.on("error", () => {}); // the client's own abort
      res.on("end", () => (ended = true));
      res.on("error", () => {});
    });
    req.on("error", () => {});
    req.end(JSON.stringify({ ...payload, stream: true }));
    return { lines, req, contentType: () => contentType, ended: () => ended };
  }

  test("streamed submission: NDJSON task lines first, then status, output and result; ends after the last", async () => {
    const s = openStream({ inputs: [b64("1"), b64("2")] });
    await waitFor(() => s.lines.length >= 2, { what: "task lines" });
    assert.match(s.contentType(), /application\/x-ndjson/);
    const ids = s.lines.map((l) => l.task_id as string);
    assert.deepEqual(s.lines.slice(0, 2), [
      { event: "task", index: 0, task_id: ids[0] },
      { event: "task", index: 1, task_id: ids[1] },
    ]);
    await h.event({ type: "started", taskId: ids[1] as string, stubId });
    await waitFor(() => s.lines.some((l) => l.event === "status"));
    h.output(ids[1] as string, "stdout", "printed\n");
    await waitFor(() => s.lines.some((l) => l.event === "output"), { what: "output line" });
    await h.event({
      type: "finished",
      taskId: ids[1] as string,
      stubId,
      status: "COMPLETE",
      result: b64("four"),
    });
    await h.event({
      type: "finished",
      taskId: ids[0] as string,
      stubId,
      status: "EXPIRED",
      reason: "expired",
    });
    await waitFor(() => s.ended(), { what: "the stream to end" });
    assert.deepEqual(s.lines[2], { event: "status", index: 1, task_id: ids[1], status: "RUNNING" });
    assert.deepEqual(s.lines[3], {
      event: "output",
      index: 1,
      task_id: ids[1],
      stream: "stdout",
      data: "printed\n",
    });
    assert.deepEqual(s.lines[4], {
      event: "result",
      index: 1,
      task_id: ids[1],
      status: "COMPLETE",
      result: b64("four"),
    });
    assert.equal(s.lines[5]?.status, "EXPIRED");
    assert.equal(s.lines.length, 6);
  });

  test("a streamed submission that fails says so in an error line", async () => {
    const s = openStream({ inputs: [Buffer.alloc(MAX_TASK_ARGS_BYTES + 10).toString("base64")] });
    await waitFor(() => s.ended(), { what: "the stream to end" });
    assert.equal(s.lines[0]?.event, "error");
    assert.equal((s.lines[0]?.error as { code?: string } | undefined)?.code, "task_args_too_large");
  });

  test("a client that leaves early cancels its unfinished non-headless tasks, not headless ones", async () => {
    const s = openStream({ inputs: [b64("1"), b64("2")] });
    const headless = openStream({ inputs: [b64("3")], headless: true });
    await waitFor(() => s.lines.length >= 2 && headless.lines.length >= 1, { what: "task lines" });
    const ids = s.lines.map((l) => l.task_id as string);
    await h.event({ type: "started", taskId: ids[0] as string, stubId });
    await h.event({
      type: "finished",
      taskId: ids[0] as string,
      stubId,
      status: "COMPLETE",
      result: b64("x"),
    });
    await waitFor(() => s.lines.some((l) => l.event === "result"));
    s.req.destroy();
    headless.req.destroy();
    const status = async (id: string) => (await h.tasks.getTask(h.ws.id, id)).status;
    await waitFor(async () => (await status(ids[1] as string)) === "CANCELLED", {
      what: "the abandoned task cancelled",
    });
    assert.equal(await status(ids[0] as string), "COMPLETE");
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(
      await status(headless.lines[0]?.task_id as string),
      "PENDING",
      "headless tasks outlive their caller",
    );
  });
});
