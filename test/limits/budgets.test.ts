// GPU-hours and CPU-hours per month (docs/limits.md) through the gateway
// submit route with a real store, nats-server, TaskService and usage tally:
// recorded GPU task runs put the workspace at its GPU-hours budget, then a
// GPU submission is refused naming the budget, its use and its reset time,
// a CPU one passes, and a budget lowered under use stops nothing that runs.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { gatewayScope, tokenScope } from "../../coordinator/http/scopes.ts";
import {
  ComputeBudgets,
  V1TokenBudget,
  WorkspaceLimitsCache,
  limitRoutes,
  monthOf,
} from "../../coordinator/limits/index.ts";
import { UNLIMITED } from "../../coordinator/limits/store.ts";
import { gatewayTaskRoutes } from "../../coordinator/tasks/gateway-routes.ts";
import { createUsage } from "../../coordinator/usage/index.ts";
import { bearer } from "../helpers/auth.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { waitUntil } from "../helpers/wait.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { type TaskHarness, startTaskHarness } from "../tasks/harness.ts";

interface Answer {
  ok?: boolean;
  task_ids?: string[];
  error: { code: string; message: string; details?: Record<string, unknown> };
  limits: Record<string, unknown>;
  usage: Record<string, number>;
}

/** The test's "now": the 20th of a month, so the month's runs and its reset are fixed. */
const NOW = Date.parse("2026-11-20T12:00:00Z");

describe("GPU-hours and CPU-hours per month", () => {
  const cleanups: (() => unknown)[] = [];
  const later = { after: (fn: () => unknown) => cleanups.push(fn) };
  let h: TaskHarness;
  let app: FastifyInstance;
  let cache: WorkspaceLimitsCache;
  let budgets: ComputeBudgets;
  let token: string;
  let adminToken: string;
  let gpuStub: string;
  let cpuStub: string;
  let running = "";

  before(async () => {
    h = await startTaskHarness(later, { budgets: { check: (ws, work) => budgets.check(ws, work) } });
    const usage = createUsage({ db: h.store.db, clock: () => NOW }).service;
    cache = new WorkspaceLimitsCache({ repo: h.store.limits });
    budgets = new ComputeBudgets({
      limits: cache,
      used: () => (ws, from, to) => usage.computeSeconds(ws, from, to),
      clock: () => NOW,
    });
    token = (await h.store.tokens.create(h.ws.id, { name: "dev" })).secret;
    adminToken = (await h.store.tokens.create(h.otherWs.id, { name: "ops", admin: true })).secret;
    const stub = async (name: string, gpu: boolean) =>
      (
        await h.tasks.upsertStub(h.ws.id, {
          name,
          type: "function",
          config: stubConfig({ runtime: { cpu: 2, gpu: gpu ? "A100" : "", memory: 1024, image_id: "" } }),
          extra: stubExtra(gpu ? { gpu_types: ["A100"], gpu_count: 2 } : {}),
        })
      ).stub.id;
    gpuStub = await stub("train", true);
    cpuStub = await stub("prep", false);

    // Recorded runs this month: 2 GPUs × 30 min, twice = 2 GPU-hours (and 1 core × 1 h = 1 CPU-hour).
    const runs = [
      ["2026-11-03T10:00:00Z", "2026-11-03T10:30:00Z"],
      ["2026-11-19T23:45:00Z", "2026-11-20T00:15:00Z"],
    ];
    for (const [from, to] of runs) {
      const [id] = await h.tasks.submit(h.ws.id, gpuStub, [new TextEncoder().encode("x")]);
      await h.event({
        type: "finished",
        taskId: id as string,
        stubId: gpuStub,
        status: "COMPLETE",
        startedAt: Date.parse(from as string),
        at: Date.parse(to as string),
      });
      await waitUntil(async () => (await h.store.tasks.get(id as string))?.endedAt, {
        what: "the run's row",
      });
    }
    // A GPU task still running when the budget is reached.
    running = (await h.tasks.submit(h.ws.id, gpuStub, [new TextEncoder().encode("x")]))[0] as string;
    await h.event({ type: "started", taskId: running, stubId: gpuStub, at: NOW - 60_000 });
    await waitUntil(async () => (await h.store.tasks.get(running))?.status === "RUNNING", {
      what: "the running task",
    });

    app = routesApp();
    await app.register(
      tokenScope(
        h.store.tokens,
        limitRoutes({
          workspaces: h.store.workspaces,
          limits: h.store.limits,
          usage: {},
          thisMonth: (ws) => budgets.thisMonth(ws),
          onChange: (ws) => {
            cache.invalidate(ws);
            budgets.invalidate(ws);
          },
        }),
      ),
    );
    await app.register(gatewayScope(h.store.tokens, gatewayTaskRoutes(h.tasks)));
    await app.ready();
    cleanups.push(() => app.close());
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  const call = async (method: "GET" | "PUT" | "POST", url: string, auth: string, payload?: object) => {
    const res = await app.inject({ method, url, headers: bearer(auth), ...(payload ? { payload } : {}) });
    return { status: res.statusCode, body: res.json() as Answer };
  };
  const limitsUrl = () => `/api/v1/workspace/${h.ws.externalId}/limits`;
  const submit = (stubId: string) =>
    call("POST", `/api/v1/gateway/stubs/${stubId}/tasks`, token, {
      inputs: [Buffer.from("x").toString("base64")],
    });

  test("at its GPU-hours budget, a GPU submission is refused naming it; a CPU one passes; nothing running stops", async () => {
    assert.equal((await submit(gpuStub)).body.ok, true, "no budget set: GPU work passes");
    const set = await call("PUT", limitsUrl(), adminToken, { gpu_hours_per_month: 2 });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.limits.gpu_hours_per_month, 2);
    assert.equal(set.body.limits.cpu_hours_per_month, null);
    // The running task counts too: 2 GPUs × (1 h finished + 1 min running).
    assert.equal(set.body.usage.gpu_hours_this_month, 2.03);

    const refused = await submit(gpuStub);
    assert.equal(refused.body.ok, false);
    assert.equal(refused.body.error.code, "limit_exceeded");
    assert.match(
      refused.body.error.message,
      /used 2.03 of its 2 GPU-hours this month \(limit gpu_hours_per_month\).*refused until 2026-12-01T00:00:00\.000Z/,
    );
    assert.deepEqual(refused.body.error.details, {
      limit: "gpu_hours_per_month",
      gpu_hours_per_month: 2,
      used_hours: 2.03,
      resets_at: "2026-12-01T00:00:00.000Z",
    });
    assert.equal((await submit(cpuStub)).body.ok, true, "CPU work draws on no GPU budget");

    // Lowered under use: the running task stays RUNNING; only new GPU work is refused.
    await call("PUT", limitsUrl(), adminToken, { gpu_hours_per_month: 0 });
    assert.equal((await submit(gpuStub)).body.error.code, "limit_exceeded");
    assert.equal((await h.store.tasks.get(running))?.status, "RUNNING");

    // Raised past use: GPU work passes again.
    await call("PUT", limitsUrl(), adminToken, { gpu_hours_per_month: 3 });
    assert.equal((await submit(gpuStub)).body.ok, true);
  });

  test("at its CPU-hours budget every submission is refused; the budget clears with null", async () => {
    const set = await call("PUT", limitsUrl(), adminToken, {
      gpu_hours_per_month: null,
      cpu_hours_per_month: 1,
    });
    // The stubs ask for one core each (stubExtra's cpu_millicores): 1 h finished + 1 min running.
    assert.equal(set.body.usage.cpu_hours_this_month, 1.02);
    const refused = await submit(cpuStub);
    assert.equal(refused.body.error.code, "limit_exceeded");
    assert.equal(refused.body.error.details?.limit, "cpu_hours_per_month");
    assert.equal((await submit(gpuStub)).body.error.details?.limit, "cpu_hours_per_month");
    await call("PUT", limitsUrl(), adminToken, { cpu_hours_per_month: null });
    assert.equal((await submit(cpuStub)).body.ok, true);
  });

  test("bad budgets are 400 naming the field", async () => {
    for (const body of [{ gpu_hours_per_month: -1 }, { cpu_hours_per_month: 1.5 }]) {
      const r = await call("PUT", limitsUrl(), adminToken, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.body.error.message, /hours_per_month/);
    }
  });
});

test("the month's use is tallied once per few seconds, concurrent checks share it, and a new month starts afresh", async () => {
  const clock = { now: Date.parse("2026-11-30T23:59:58Z") };
  const windows: [string, string][] = [];
  const limits = { ...UNLIMITED, gpuHoursPerMonth: 1 };
  const budgets = new ComputeBudgets({
    limits: { get: async () => limits },
    used: () => async (_ws, from, to) => {
      windows.push([new Date(from).toISOString(), new Date(to).toISOString()]);
      return { gpuSeconds: 3600, cpuSeconds: 0 };
    },
    ttlMs: 5000,
    clock: () => clock.now,
  });
  const results = await Promise.allSettled(
    Array.from({ length: 200 }, () => budgets.check("ws-1", { gpus: true })),
  );
  assert.ok(results.every((r) => r.status === "rejected"));
  assert.equal(windows.length, 1, "200 checks, one tally");
  await budgets.check("ws-1", { gpus: false });
  assert.equal(windows.length, 1, "CPU work without a CPU budget reads nothing");
  clock.now += 1000;
  await assert.rejects(
    budgets.check("ws-1", { gpus: true }),
    /resets|refused until 2026-12-01T00:00:00\.000Z/,
  );
  assert.equal(windows.length, 1, "within the cache");
  clock.now += 2000; // 2026-12-01T00:00:01Z: a new month
  windows.length = 0;
  await assert.rejects(budgets.check("ws-1", { gpus: true }), /refused until 2027-01-01T00:00:00\.000Z/);
  assert.deepEqual(windows, [["2026-12-01T00:00:00.000Z", "2026-12-01T00:00:01.000Z"]]);
  assert.deepEqual(monthOf(Date.parse("2026-12-31T23:59:59Z")), {
    fromMs: Date.parse("2026-12-01T00:00:00Z"),
    resetMs: Date.parse("2027-01-01T00:00:00Z"),
  });
});

test("/v1 tokens: counted once per few seconds, tokens spent since are added, a new month starts afresh", async () => {
  const clock = { now: Date.parse("2026-11-30T23:59:50Z") };
  const windows: [string, string][] = [];
  const limits = { ...UNLIMITED, v1TokensPerMonth: 1000 as number | null };
  const budget = new V1TokenBudget({
    limits: { get: async () => limits },
    used: () => async (_ws, from, to) => {
      windows.push([new Date(from).toISOString(), new Date(to).toISOString()]);
      return 990;
    },
    ttlMs: 5000,
    clock: () => clock.now,
  });
  await Promise.all(Array.from({ length: 50 }, () => budget.check("ws-1")));
  assert.equal(windows.length, 1, "50 checks, one count");
  budget.spent("ws-1", 10);
  assert.equal(await budget.thisMonth("ws-1"), 1000);
  await assert.rejects(budget.check("ws-1"), (e: Error & { code?: string; details?: unknown }) => {
    assert.equal(e.code, "limit_exceeded");
    assert.equal(
      e.message,
      "the workspace used 1000 of its 1000 /v1 tokens this month (limit v1_tokens_per_month): /v1 requests are refused until 2026-12-01T00:00:00.000Z",
    );
    assert.deepEqual(e.details, {
      limit: "v1_tokens_per_month",
      v1_tokens_per_month: 1000,
      used_tokens: 1000,
      resets_at: "2026-12-01T00:00:00.000Z",
    });
    return true;
  });
  assert.equal(windows.length, 1, "within the cache");
  limits.v1TokensPerMonth = 1001;
  await budget.check("ws-1");
  limits.v1TokensPerMonth = 1000;
  clock.now += 6000; // past the cache: counted afresh, the tokens spent before are the count's rows now
  await budget.check("ws-1");
  assert.equal(windows.length, 2);
  assert.equal(await budget.thisMonth("ws-1"), 990);
  clock.now += 5000; // 2026-12-01T00:00:01Z: a new month
  windows.length = 0;
  await budget.check("ws-1");
  assert.deepEqual(windows, [["2026-12-01T00:00:00.000Z", "2026-12-01T00:00:01.000Z"]]);
  limits.v1TokensPerMonth = null;
  windows.length = 0;
  clock.now += 60_000;
  await budget.check("ws-1");
  assert.equal(windows.length, 0, "no budget: nothing is counted");
});
