// The metrics routes and the coordinator's /metrics through Fastify inject:
// token and workspace checks (another workspace's ws or stub is 404), the
// bucket limit (400 naming the fix), the response layout, and the
// Prometheus text with request counts, tasks, containers and agents.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { metricsRoutes } from "../../coordinator/metrics/routes.ts";
import { prometheusRoutes } from "../../coordinator/metrics/prometheus-routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { CoordinatorMetrics } from "../../coordinator/metrics/index.ts";
import { Store } from "../../coordinator/records.ts";
import { tempDir } from "../helpers/env.ts";
import { storedStub } from "../tasks/fixtures.ts";
import { parseProm } from "./prom-text.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { bearer } from "../helpers/auth.ts";

const T0 = Date.parse("2030-06-01T00:00:00.000Z");
const iso = (ms: number) => new Date(ms).toISOString();

describe("metrics routes and /metrics", () => {
  let store: Store;
  let app: FastifyInstance;
  let guarded: FastifyInstance;
  let token: string;
  let otherToken: string;
  let wsExt: string;
  let otherExt: string;
  let stubId: string;
  let otherStubId: string;
  const cleanups: (() => unknown)[] = [];
  const hooks = { after: (fn: () => unknown) => cleanups.push(fn) };

  const build = async (metricsToken?: string) => {
    const metrics = new CoordinatorMetrics({
      taskCounts: () => store.metrics.taskStatusCounts(),
      containers: () => [{ stubId }, { stubId }, { stubId: otherStubId }],
      stubType: async (id) => (await store.stubs.get(id))?.type,
      agents: () => [
        { state: "ready", pool: "default" },
        { state: "ready", pool: "h100" },
        { state: "lost", pool: "default" },
      ],
      processMetrics: false,
    });
    const a = routesApp();
    await a.register(prometheusRoutes({ metrics, ...(metricsToken ? { token: metricsToken } : {}) }));
    await a.register(
      tokenScope(
        store.tokens,
        metricsRoutes({ metrics: store.metrics, stubs: store.stubs, clock: () => T0 + 3_600_000 }),
      ),
    );
    cleanups.unshift(() => a.close());
    return a;
  };

  before(async () => {
    store = await Store.open(`sqlite:${tempDir(hooks)}/b.db`);
    cleanups.push(() => store.close());
    const ws = await store.workspaces.create("main");
    wsExt = ws.externalId;
    token = (await store.tokens.create(ws.id, { name: "u" })).secret;
    const other = await store.workspaces.create("other");
    otherExt = other.externalId;
    otherToken = (await store.tokens.create(other.id)).secret;
    stubId = (await storedStub(store.stubs, ws.id)).id;
    otherStubId = (await storedStub(store.stubs, other.id, { type: "endpoint" })).id;
    await store.metrics.insertContainerSamples([
      {
        containerId: "ctr-1",
        atMs: T0 + 30_000,
        agentId: "a",
        pool: "default",
        workspaceId: ws.id,
        stubId,
        cpuCores: 0.75,
        memoryBytes: 4096,
        cpuLimitCores: 1,
        memoryLimitBytes: 8192,
        gpuCount: 0,
        gpuUtilization: null,
        gpuMemoryBytes: null,
      },
    ]);
    await store.db
      .insertInto("tasks")
      .values({
        id: "task-r1",
        workspace_id: ws.id,
        stub_id: stubId,
        status: "COMPLETE",
        attempt: 0,
        headless: 0,
        created_at: iso(T0 + 1000),
        started_at: iso(T0 + 2000),
        ended_at: iso(T0 + 2500),
        updated_at: iso(T0),
      })
      .execute();
    await store.metrics.claimPoolSample({
      pool: "default",
      bucketMs: T0,
      atMs: T0,
      coordinatorId: "c",
      agents: 1,
      cpuCapacityCores: 8,
      cpuAllocatedCores: 1,
      cpuUsedCores: 0.75,
      memoryCapacityBytes: 1 << 20,
      memoryAllocatedBytes: 8192,
      memoryUsedBytes: 4096,
      gpuCapacity: 0,
      gpuAllocated: 0,
    });
    app = await build();
    guarded = await build("scrape-token-0123456789");
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const get = (url: string, t: string | undefined = token, on = app) =>
    on.inject({ method: "GET", url, headers: t ? bearer(t) : {} });
  const message = (r: { json(): unknown }) => (r.json() as { error: { message: string } }).error.message;
  const range = `from=${encodeURIComponent(iso(T0))}&to=${encodeURIComponent(iso(T0 + 120_000))}&step=1m`;

  test("stub-timeseries: every series over every bucket; the stub's containers and tasks", async () => {
    const r = await get(`/api/v1/metrics/${wsExt}/stub-timeseries?stub_id=${stubId}&${range}`);
    assert.equal(r.statusCode, 200, r.body);
    const body = r.json() as {
      from: string;
      to: string;
      step_seconds: number;
      series: {
        name: string;
        unit: string;
        labels?: Record<string, string>;
        points: [string, number | null][];
      }[];
    };
    assert.equal(body.from, iso(T0));
    assert.equal(body.step_seconds, 60);
    const s = (name: string, status?: string) =>
      body.series.find((x) => x.name === name && x.labels?.status === status);
    assert.deepEqual(s("cpu_cores")?.points, [
      [iso(T0), 0.75],
      [iso(T0 + 60_000), null],
    ]);
    assert.equal(s("cpu_cores")?.unit, "cores");
    assert.deepEqual(s("tasks_created", "COMPLETE")?.points, [
      [iso(T0), 1],
      [iso(T0 + 60_000), 0],
    ]);
    assert.deepEqual(s("task_duration_max")?.points[0], [iso(T0), 500]);
  });

  test("workspace-timeseries and pool-timeseries", async () => {
    const w = await get(`/api/v1/metrics/${wsExt}/workspace-timeseries?${range}`);
    assert.equal(w.statusCode, 200, w.body);
    assert.deepEqual(
      (w.json() as { series: { name: string; points: unknown[] }[] }).series.find(
        (x) => x.name === "memory_bytes",
      )?.points[0],
      [iso(T0), 4096],
    );
    const p = await get(`/api/v1/metrics/${wsExt}/pool-timeseries?${range}`);
    assert.equal(p.statusCode, 200, p.body);
    const cap = (
      p.json() as { series: { name: string; labels: { pool: string }; points: unknown[] }[] }
    ).series.find((x) => x.name === "cpu_capacity");
    assert.equal(cap?.labels.pool, "default");
    assert.deepEqual(cap?.points[0], [iso(T0), 8]);
    // Defaults: the hour before now, by minutes.
    const d = await get(`/api/v1/metrics/${wsExt}/workspace-timeseries`);
    assert.equal(d.statusCode, 200, d.body);
    assert.equal((d.json() as { series: { points: unknown[] }[] }).series[0]?.points.length, 60);
  });

  test("another workspace's ws or stub is 404; no token is 401; bad ranges are 400 with the cause", async () => {
    assert.equal((await get(`/api/v1/metrics/${otherExt}/workspace-timeseries`)).statusCode, 404);
    assert.equal((await get(`/api/v1/metrics/${wsExt}/pool-timeseries`, otherToken)).statusCode, 404);
    const foreignStub = await get(
      `/api/v1/metrics/${otherExt}/stub-timeseries?stub_id=${stubId}`,
      otherToken,
    );
    assert.equal(foreignStub.statusCode, 404);
    assert.match(message(foreignStub), /stub .* not found/);
    assert.equal((await get(`/api/v1/metrics/${wsExt}/stub-timeseries?stub_id=stub-nope`)).statusCode, 404);
    assert.equal(
      (await get(`/api/v1/metrics/${wsExt}/stub-timeseries`)).statusCode,
      400,
      "stub_id is required",
    );
    assert.equal((await get(`/api/v1/metrics/${wsExt}/workspace-timeseries`, "")).statusCode, 401);
    const tooMany = await get(
      `/api/v1/metrics/${wsExt}/workspace-timeseries?from=${encodeURIComponent(iso(T0 - 7 * 86_400_000))}&step=10`,
    );
    assert.equal(tooMany.statusCode, 400);
    assert.match(
      message(tooMany),
      /buckets of 10 s; at most 1440: widen step to at least 423 s or narrow the range/,
    );
    const badStep = await get(`/api/v1/metrics/${wsExt}/workspace-timeseries?step=fast`);
    assert.match(message(badStep), /step "fast" must be whole seconds/);
    const backwards = await get(
      `/api/v1/metrics/${wsExt}/workspace-timeseries?from=${encodeURIComponent(iso(T0 + 9e6))}`,
    );
    assert.match(message(backwards), /from must be before to/);
    const badTime = await get(`/api/v1/metrics/${wsExt}/workspace-timeseries?to=yesterday`);
    assert.match(message(badTime), /to "yesterday" is not an ISO 8601 time or unix seconds/);
  });

  test("/metrics: Prometheus text with tasks, containers by stub type, agents, request counts; no workspace ids", async () => {
    await get(`/api/v1/metrics/${wsExt}/workspace-timeseries`);
    const r = await app.inject({ method: "GET", url: "/metrics" });
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers["content-type"]), /^text\/plain; version=0\.0\.4/);
    const samples = parseProm(r.body);
    const value = (name: string, labels: Record<string, string>) =>
      samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
        ?.value;
    assert.equal(value("berth_tasks", { status: "COMPLETE" }), 1);
    assert.equal(value("berth_tasks", { status: "FAILED" }), 0);
    assert.equal(value("berth_containers", { stub_type: "function" }), 2);
    assert.equal(value("berth_containers", { stub_type: "endpoint" }), 1);
    assert.equal(value("berth_agents", { state: "ready", pool: "default" }), 1);
    assert.equal(value("berth_agents", { state: "ready", pool: "h100" }), 1);
    assert.equal(value("berth_agents", { state: "lost", pool: "default" }), 1);
    assert.equal(value("berth_agents", { state: "lost", pool: "h100" }), 0);
    const route = "/api/v1/metrics/:ws/workspace-timeseries";
    assert.ok((value("berth_http_requests_total", { method: "GET", route, status_code: "200" }) ?? 0) >= 1);
    assert.ok(
      value("berth_http_request_duration_seconds_count", { route, status_code: "200" }) !== undefined,
    );
    assert.ok(!r.body.includes(wsExt) && !r.body.includes(stubId), "no workspace or stub id in /metrics");
  });

  test("/metrics with metricsToken: 401 without it or with another, 200 with it", async () => {
    assert.equal((await guarded.inject({ method: "GET", url: "/metrics" })).statusCode, 401);
    assert.equal((await get("/metrics", "wrong-token-but-long-enough", guarded)).statusCode, 401);
    const ok = await get("/metrics", "scrape-token-0123456789", guarded);
    assert.equal(ok.statusCode, 200);
    assert.ok(parseProm(ok.body).some((s) => s.name === "berth_agents"));
  });
});
