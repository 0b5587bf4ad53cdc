// `/api/v1/workspace/{ws}/limits` over a listening server with a real
// SQLite store, a real nats-server and a real TaskService: who may read and
// set limits, the response shape with usage, bad bodies, and task
// submission refused with limit_exceeded once max_pending_tasks is reached.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { connect } from "nats";
import pino from "pino";
import { HTTP_STATUS } from "../../coordinator/http/errors.ts";
import { gatewayTaskRoutes } from "../../coordinator/tasks/gateway-routes.ts";
import { limitRoutes } from "../../coordinator/limits/routes.ts";
import { gatewayScope, tokenScope } from "../../coordinator/http/scopes.ts";
import { WorkspaceLimitsCache } from "../../coordinator/limits/limits.ts";
import { Objects } from "../../coordinator/objects/objects.ts";
import { Store } from "../../coordinator/records.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { TaskService } from "../../coordinator/tasks/service.ts";
import { CATALOG } from "../../shared/errors.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { tempDir } from "../helpers/env.ts";
import { startTestNats } from "../helpers/nats.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { bearer } from "../helpers/auth.ts";

/** The fields these tests read of any answer (limits route, gateway, error). */
interface Answer {
  ok?: boolean;
  error: { code: string; message: string };
  limits: Record<string, number | null>;
  usage: Record<string, number>;
  [k: string]: unknown;
}

/** A workspace's limits with none set, as the route writes them. */
const DEFAULT_LIMITS = {
  max_containers: 32,
  max_cpu_millicores: null,
  max_memory_mb: null,
  max_gpus: null,
  max_pending_tasks: null,
  max_queue_items: null,
  max_volume_mb: null,
  max_inference_requests: null,
  max_tokens_per_minute: null,
  gpu_hours_per_month: null,
  cpu_hours_per_month: null,
  v1_tokens_per_month: null,
  isolation: null,
  user_namespace: true,
  syscall_filter: "allowlist",
  max_gpus_by_type: null,
};

/** An answer's two opt-outs: [user_namespace, syscall_filter]. */
const optOuts = (r: { body: Answer }) => [r.body.limits.user_namespace, r.body.limits.syscall_filter];

describe("workspace limits routes", () => {
  const cleanups: (() => unknown)[] = [];
  const later = { after: (fn: () => unknown) => cleanups.push(fn) };
  let app: FastifyInstance;
  let baseUrl: string;
  let store: Store;
  let tasks: TaskService;
  let ops: Workspace;
  let team: Workspace;
  let adminToken: string;
  let teamToken: string;
  let opsUserToken: string;
  let stubId: string;
  const changed: string[] = [];

  before(async () => {
    const nats = await startTestNats(later);
    const dir = tempDir(later);
    store = await Store.open(`sqlite:${dir}/berth.db`);
    cleanups.push(() => store.close());
    const nc = await connect({
      servers: nats.url,
      user: nats.coordinator.user,
      pass: nats.coordinator.password,
    });
    cleanups.push(() => closeNats(nc));
    const log = pino({ level: "silent" });
    const cache = new WorkspaceLimitsCache({ repo: store.limits });
    tasks = new TaskService({
      store,
      nats: nc,
      objects: new Objects(store.objects, dir),
      log,
      limits: cache,
    });
    await tasks.start();
    cleanups.push(() => tasks.stop());

    ops = await store.workspaces.create("ops");
    team = await store.workspaces.create("team");
    adminToken = (await store.tokens.create(ops.id, { name: "admin", admin: true })).secret;
    opsUserToken = (await store.tokens.create(ops.id, { name: "user" })).secret;
    teamToken = (await store.tokens.create(team.id, { name: "user" })).secret;
    stubId = (
      await tasks.upsertStub(team.id, {
        name: "f",
        type: "function",
        config: stubConfig(),
        extra: stubExtra(),
      })
    ).stub.id;

    app = routesApp();
    await app.register(
      tokenScope(
        store.tokens,
        limitRoutes({
          workspaces: store.workspaces,
          limits: store.limits,
          usage: {
            containers: (ws) =>
              ws === team.id
                ? {
                    containers: 2,
                    cpuMillicores: 1500,
                    memoryBytes: 1536 * 1024 * 1024 + 1,
                    gpus: 1,
                    gpusByType: { A100: 1 },
                  }
                : { containers: 0, cpuMillicores: 0, memoryBytes: 0, gpus: 0 },
            pendingTasks: (ws) => tasks.pendingTasks(ws),
          },
          onChange: (ws) => {
            changed.push(ws);
            cache.invalidate(ws);
          },
        }),
      ),
    );
    await app.register(gatewayScope(store.tokens, gatewayTaskRoutes(tasks)));
    await app.listen({ host: "127.0.0.1", port: 0 });
    cleanups.push(() => app.close());
    const addr = app.server.address();
    baseUrl = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  const call = async (method: string, path: string, token: string, body?: unknown) => {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { ...bearer(token), ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as Answer };
  };
  const limitsOf = (ws: Workspace) => `/api/v1/workspace/${ws.externalId}/limits`;
  /** An admin's PUT of `body` on team's limits is a 400 invalid_request whose message matches `message`. */
  const refusedPut = async (body: unknown, message: RegExp) => {
    const r = await call("PUT", limitsOf(team), adminToken, body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.body.error.code, "invalid_request");
    assert.match(r.body.error.message, message, JSON.stringify(r.body));
  };

  test("any token of the workspace reads its limits and usage", async () => {
    const r = await call("GET", limitsOf(team), teamToken);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, {
      workspace_id: team.externalId,
      limits: DEFAULT_LIMITS,
      usage: {
        containers: 2,
        cpu_millicores: 1500,
        memory_mb: 1537,
        gpus: 1,
        gpus_by_type: { A100: 1 },
        pending_tasks: 0,
        queue_items: 0,
        volume_mb: 0,
        inference_requests: 0,
        tokens_last_minute: 0,
        gpu_hours_this_month: 0,
        cpu_hours_this_month: 0,
        v1_tokens_this_month: 0,
      },
    });
  });

  test("another workspace's ordinary token gets 404 on both routes; an admin token reaches any workspace", async () => {
    assert.equal((await call("GET", limitsOf(team), opsUserToken)).status, 404);
    const put = await call("PUT", limitsOf(team), opsUserToken, { max_gpus: 1 });
    assert.equal(put.status, 404);
    assert.equal(put.body.error.code, "not_found");
    assert.equal((await call("GET", limitsOf(ops), teamToken)).status, 404);
    assert.equal((await call("GET", "/api/v1/workspace/ws-nope/limits", adminToken)).status, 404);
    assert.equal((await call("GET", limitsOf(team), adminToken)).status, 200);
    assert.equal((await call("GET", limitsOf(team), "bt_nope")).status, 401);
  });

  test("only an admin token sets limits; fields left out keep their values", async () => {
    const denied = await call("PUT", limitsOf(team), teamToken, { max_pending_tasks: 1 });
    assert.equal(denied.status, 403);
    assert.match(denied.body.error.message, /admin/);
    const set = await call("PUT", limitsOf(team), adminToken, {
      max_cpu_millicores: 4000,
      max_memory_mb: 8192,
    });
    assert.equal(set.status, 200);
    assert.deepEqual(set.body.limits, { ...DEFAULT_LIMITS, max_cpu_millicores: 4000, max_memory_mb: 8192 });
    const zero = await call("PUT", limitsOf(team), adminToken, { max_gpus: 0 });
    assert.equal(zero.body.limits.max_gpus, 0, "0 is a limit of its own, not null");
    const again = await call("PUT", limitsOf(team), adminToken, {
      max_memory_mb: null,
      max_gpus: 2,
      max_queue_items: 1000,
    });
    assert.deepEqual(again.body.limits, {
      ...DEFAULT_LIMITS,
      max_cpu_millicores: 4000,
      max_gpus: 2,
      max_queue_items: 1000,
    });
    assert.deepEqual((await call("GET", limitsOf(team), teamToken)).body.limits, again.body.limits);
    assert.deepEqual(changed.slice(-2), [team.id, team.id]);
  });

  test("isolation: an admin forces gVisor on a workspace and gives it back", async () => {
    const denied = await call("PUT", limitsOf(team), teamToken, { isolation: "gvisor" });
    assert.equal(denied.status, 403);
    const forced = await call("PUT", limitsOf(team), adminToken, { isolation: "gvisor" });
    assert.equal(forced.status, 200, JSON.stringify(forced.body));
    assert.equal(forced.body.limits.isolation, "gvisor");
    assert.equal((await call("GET", limitsOf(team), teamToken)).body.limits.isolation, "gvisor");
    const bad = await call("PUT", limitsOf(team), adminToken, { isolation: "runsc" });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error.message, /isolation/);
    const back = await call("PUT", limitsOf(team), adminToken, { isolation: null });
    assert.equal(back.body.limits.isolation, null);
  });

  test("opt-outs: an admin turns the user namespace and the allow list off for a workspace and back on", async () => {
    const denied = await call("PUT", limitsOf(team), teamToken, { user_namespace: false });
    assert.equal(denied.status, 403, "a workspace cannot opt itself out");
    const other = await call("PUT", limitsOf(team), opsUserToken, { syscall_filter: "denylist" });
    assert.equal(other.status, 404, "another workspace's token");
    assert.equal(
      (await call("GET", limitsOf(team), teamToken)).body.limits.user_namespace,
      true,
      "unchanged",
    );
    const out = await call("PUT", limitsOf(team), adminToken, {
      user_namespace: false,
      syscall_filter: "denylist",
    });
    assert.equal(out.status, 200, JSON.stringify(out.body));
    assert.deepEqual(optOuts(out), [false, "denylist"]);
    const read = await call("GET", limitsOf(team), teamToken);
    assert.deepEqual(optOuts(read), [false, "denylist"]);
    const kept = await call("PUT", limitsOf(team), adminToken, { max_gpus: 4 });
    assert.deepEqual(optOuts(kept), [false, "denylist"], "a limit change keeps them");
    // Each is checked as sent: the schema's coercion must not read null, 0 or "false" as an opt-out.
    for (const [body, re] of [
      [{ user_namespace: null }, /user_namespace must be true or false; got null/],
      [{ user_namespace: 0 }, /user_namespace must be true or false; got 0/],
      [{ user_namespace: "false" }, /user_namespace must be true or false; got "false"/],
      [
        { user_namespace: true, syscall_filter: "off" },
        /syscall_filter must be "allowlist" or "denylist"; got "off"/,
      ],
      [{ syscall_filter: null }, /syscall_filter must be "allowlist" or "denylist"; got null/],
    ] as const) {
      await refusedPut(body, re);
    }
    const after = await call("GET", limitsOf(team), teamToken);
    assert.deepEqual(optOuts(after), [false, "denylist"], "nothing half written");
    const back = await call("PUT", limitsOf(team), adminToken, {
      user_namespace: true,
      syscall_filter: "allowlist",
      max_gpus: null,
    });
    assert.deepEqual(optOuts(back), [true, "allowlist"]);
  });

  test("max_gpus_by_type: an admin sets GPUs by type, reads them with usage by type, and clears them", async () => {
    const denied = await call("PUT", limitsOf(team), teamToken, { max_gpus_by_type: { A100: 1 } });
    assert.equal(denied.status, 403);
    const set = await call("PUT", limitsOf(team), adminToken, { max_gpus_by_type: { A100: 2, H100: 0 } });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.deepEqual(set.body.limits.max_gpus_by_type, { A100: 2, H100: 0 });
    const read = await call("GET", limitsOf(team), teamToken);
    assert.deepEqual(read.body.limits.max_gpus_by_type, { A100: 2, H100: 0 });
    assert.deepEqual(read.body.usage.gpus_by_type, { A100: 1 });
    // Other fields left out keep it; {} and null both clear it.
    const other = await call("PUT", limitsOf(team), adminToken, { max_gpus: 3 });
    assert.deepEqual(other.body.limits.max_gpus_by_type, { A100: 2, H100: 0 });
    assert.equal(
      (await call("PUT", limitsOf(team), adminToken, { max_gpus_by_type: {} })).body.limits.max_gpus_by_type,
      null,
    );
    await call("PUT", limitsOf(team), adminToken, { max_gpus_by_type: { L4: 1 } });
    assert.equal(
      (await call("PUT", limitsOf(team), adminToken, { max_gpus_by_type: null })).body.limits
        .max_gpus_by_type,
      null,
    );
    for (const body of [
      { max_gpus_by_type: { A100: -1 } },
      { max_gpus_by_type: { A100: 1.5 } },
      { max_gpus_by_type: { A100: "two" } },
      { max_gpus_by_type: { "A100 GPU": 1 } },
      { max_gpus_by_type: { a100: 1, A100: 2 } },
      { max_gpus_by_type: [1] },
    ]) {
      await refusedPut(body, /max_gpus_by_type/);
    }
    assert.equal(
      (await call("GET", limitsOf(team), teamToken)).body.limits.max_gpus_by_type,
      null,
      "nothing half written",
    );
  });

  test("v1_tokens_per_month: an admin sets the /v1 token budget, reads it back, and removes it", async () => {
    const set = await call("PUT", limitsOf(team), adminToken, { v1_tokens_per_month: 250_000 });
    assert.equal(set.status, 200);
    assert.equal(set.body.limits.v1_tokens_per_month, 250_000);
    assert.equal(set.body.usage.v1_tokens_this_month, 0);
    const read = await call("GET", limitsOf(team), teamToken);
    assert.equal(read.body.limits.v1_tokens_per_month, 250_000);
    for (const body of [
      { v1_tokens_per_month: -1 },
      { v1_tokens_per_month: 2.5 },
      { v1_tokens_per_month: "many" },
    ]) {
      await refusedPut(body, /v1_tokens_per_month/);
    }
    assert.equal((await call("GET", limitsOf(team), teamToken)).body.limits.v1_tokens_per_month, 250_000);
    const removed = await call("PUT", limitsOf(team), adminToken, { v1_tokens_per_month: null });
    assert.equal(removed.body.limits.v1_tokens_per_month, null);
  });

  test("bad bodies are 400 naming the cause", async () => {
    for (const body of [
      { max_gpus: -1 },
      { max_containers: 1.5 },
      { max_cpus: 3 },
      { max_memory_mb: "lots" },
    ]) {
      await refusedPut(body, /max_|additional properties/);
    }
  });

  test("submission past max_pending_tasks is refused with limit_exceeded naming the limit", async () => {
    const set = await call("PUT", limitsOf(team), adminToken, { max_pending_tasks: 3 });
    assert.equal(set.body.limits.max_pending_tasks, 3);
    const submit = (n: number) =>
      call("POST", `/api/v1/gateway/stubs/${stubId}/tasks`, teamToken, {
        inputs: Array.from({ length: n }, () => Buffer.from("x").toString("base64")),
      });
    const first = await submit(2);
    assert.equal(first.body.ok, true);
    // 2 waiting + 2 would pass 3: the whole submission is refused.
    const refused = await submit(2);
    assert.equal(refused.body.ok, false);
    assert.equal(refused.body.error.code, "limit_exceeded");
    assert.match(refused.body.error.message, /2 pending tasks.*max_pending_tasks is 3/);
    assert.equal(HTTP_STATUS[CATALOG.limit_exceeded.kind], 429, "the REST routes answer 429");
    assert.equal((await submit(1)).body.ok, true);
    assert.equal((await call("GET", limitsOf(team), teamToken)).body.usage.pending_tasks, 3);
    const full = await submit(1);
    assert.equal(full.body.error.code, "limit_exceeded");
    // Concurrent submissions cannot pass the limit together.
    await call("PUT", limitsOf(team), adminToken, { max_pending_tasks: 10 });
    const results = await Promise.all(Array.from({ length: 12 }, () => submit(1)));
    assert.equal(results.filter((r) => r.body.ok).length, 7);
    assert.equal(tasks.pendingTasks(team.id), 10);
    // Another workspace is not held back by this one's limit.
    assert.equal(tasks.pendingTasks(ops.id), 0);
  });
});
