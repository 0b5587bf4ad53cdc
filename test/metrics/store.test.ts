// Metrics rows and time-series queries on SQLite and PostgreSQL: container
// samples bucketed per container then summed, task counts and run times per
// bucket (the median the same on both engines), pool samples written once
// per interval by competing coordinators, pruning by age, and ingest of
// agents' rounds over a real NATS server.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { connect } from "nats";
import { MetricsIngest, PoolSampler, parseRange, stubTimeseries } from "../../coordinator/metrics/index.ts";
import type { LiveAgent } from "../../coordinator/fleet/fleet-view.ts";
import type { ContainerSampleRow } from "../../coordinator/metrics/store.ts";
import { Store } from "../../coordinator/records.ts";
import { waitFor } from "../../shared/net.ts";
import { type AgentMetricsMessage, subjects } from "../../shared/subjects.ts";
import { tempDir } from "../helpers/env.ts";
import { startTestNats } from "../helpers/nats.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { storedStub } from "../tasks/fixtures.ts";

const T0 = Date.parse("2030-01-01T00:00:00.000Z");
const iso = (ms: number) => new Date(ms).toISOString();

function sample(over: Partial<ContainerSampleRow>): ContainerSampleRow {
  return {
    containerId: "ctr-a",
    atMs: T0,
    agentId: "agent-1",
    pool: "default",
    workspaceId: null,
    stubId: null,
    cpuCores: 0,
    memoryBytes: 0,
    cpuLimitCores: 1,
    memoryLimitBytes: 1 << 30,
    gpuCount: 0,
    gpuUtilization: null,
    gpuMemoryBytes: null,
    ...over,
  };
}

function liveAgent(agentId: string, cpuCores: number, gpus: number): LiveAgent {
  return {
    agentId,
    lastSeen: 0,
    state: "ready",
    heartbeat: {
      agentId,
      hostname: agentId,
      version: "t",
      sentAt: 0,
      intervalMs: 5000,
      grpcAddress: "x:1",
      capacity: {
        cpuCores,
        memoryBytes: 8 * 2 ** 30,
        disk: { path: "/", totalBytes: 1, freeBytes: 1 },
        gpus: {
          available: gpus > 0,
          toolkit: false,
          devices: Array.from({ length: gpus }, (_, i) => ({
            index: i,
            uuid: `GPU-${agentId}-${i}`,
            model: "m",
            type: "H100",
            memoryMiB: 80,
          })),
        },
      },
    },
  };
}

for (const engine of STORE_ENGINES) {
  describe(`metrics store on ${engine.name}`, () => {
    let store: Store;
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };
    let wsId: string;
    let stubId: string;

    before(async () => {
      store = await Store.open(await engine.url(suite));
      const ws = await store.workspaces.create("metrics");
      wsId = ws.id;
      stubId = (await storedStub(store.stubs, ws.id)).id;
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("container samples: per-container means summed per bucket; duplicates ignored; other stubs apart", async () => {
      const s = (over: Partial<ContainerSampleRow>) => sample({ workspaceId: wsId, stubId, ...over });
      await store.metrics.insertContainerSamples([
        // bucket 0 (first minute): ctr-a 1.0 then 3.0 cores (mean 2), ctr-b 0.5; GPU on ctr-b only
        s({ containerId: "ctr-a", atMs: T0 + 10_000, cpuCores: 1, memoryBytes: 100 }),
        s({ containerId: "ctr-a", atMs: T0 + 20_000, cpuCores: 3, memoryBytes: 300 }),
        s({
          containerId: "ctr-b",
          atMs: T0 + 30_000,
          cpuCores: 0.5,
          memoryBytes: 1000,
          gpuCount: 1,
          gpuUtilization: 40,
          gpuMemoryBytes: 2048,
        }),
        // bucket 2 (third minute)
        s({ containerId: "ctr-a", atMs: T0 + 125_000, cpuCores: 0.25, memoryBytes: 50 }),
        // another stub of the workspace: in workspace totals, not the stub's
        s({ containerId: "ctr-c", atMs: T0 + 15_000, stubId: "stub-other", cpuCores: 4, memoryBytes: 7 }),
      ]);
      await store.metrics.insertContainerSamples([
        s({ containerId: "ctr-a", atMs: T0 + 10_000, cpuCores: 99 }),
      ]);
      const range = { fromMs: T0, toMs: T0 + 180_000, stepMs: 60_000 };
      const stub = await store.metrics.containerSeries({ workspaceId: wsId, stubId }, range);
      assert.deepEqual(stub, [
        {
          bucket: 0,
          containers: 2,
          cpuCores: 2.5,
          memoryBytes: 1200,
          gpuUtilization: 40,
          gpuMemoryBytes: 2048,
        },
        {
          bucket: 2,
          containers: 1,
          cpuCores: 0.25,
          memoryBytes: 50,
          gpuUtilization: null,
          gpuMemoryBytes: null,
        },
      ]);
      const ws = await store.metrics.containerSeries({ workspaceId: wsId }, range);
      assert.equal(ws[0]?.containers, 3);
      assert.equal(ws[0]?.cpuCores, 6.5);
      assert.deepEqual(await store.metrics.containerSeries({ workspaceId: "ws-nobody" }, range), []);
    });

    test("task counts by status and run times (avg, max, interpolated median) per bucket", async () => {
      const rows: [string, number, number | null, number | null][] = [
        // status, created offset, run ms, ended offset
        ["COMPLETE", 1_000, 100, 5_000],
        ["COMPLETE", 2_000, 300, 6_000],
        ["FAILED", 3_000, 200, 7_000],
        ["COMPLETE", 4_000, 1_000, 8_000],
        ["PENDING", 50_000, null, null],
        ["COMPLETE", 61_000, 50, 65_000],
      ];
      await store.db
        .insertInto("tasks")
        .values(
          rows.map(([status, created, run, ended], i) => ({
            id: `task-${engine.name}-${i}`,
            workspace_id: wsId,
            stub_id: stubId,
            status,
            attempt: 0,
            headless: 0,
            created_at: iso(T0 + created),
            started_at: run === null || ended === null ? null : iso(T0 + ended - run),
            ended_at: ended === null ? null : iso(T0 + ended),
            updated_at: iso(T0),
          })),
        )
        .execute();
      const range = { fromMs: T0, toMs: T0 + 120_000, stepMs: 60_000 };
      const counts = await store.metrics.taskCounts({ workspaceId: wsId, stubId }, range);
      assert.deepEqual(counts, [
        { bucket: 0, status: "COMPLETE", count: 3 },
        { bucket: 0, status: "FAILED", count: 1 },
        { bucket: 0, status: "PENDING", count: 1 },
        { bucket: 1, status: "COMPLETE", count: 1 },
      ]);
      const d = await store.metrics.taskDurations({ workspaceId: wsId, stubId }, range);
      assert.deepEqual(d, [
        { bucket: 0, count: 4, avgMs: 400, maxMs: 1000, p50Ms: 250 },
        { bucket: 1, count: 1, avgMs: 50, maxMs: 50, p50Ms: 50 },
      ]);
      const odd = await store.metrics.taskDurations(
        { workspaceId: wsId, stubId },
        { ...range, fromMs: T0 + 5_500, toMs: T0 + 60_000 },
      );
      // 300, 200, 1000 in the first bucket: the middle one
      assert.equal(odd[0]?.p50Ms, 300);
      assert.deepEqual(await store.metrics.taskStatusCounts(), { COMPLETE: 4, FAILED: 1, PENDING: 1 });

      const r = parseRange({ from: iso(T0), to: iso(T0 + 120_000), step: "1m" }, Date.now());
      const series = await stubTimeseries(store.metrics, { workspaceId: wsId, stubId }, r);
      const byName = (name: string, status?: string) =>
        series.find((x) => x.name === name && (status === undefined || x.labels?.status === status))?.points;
      assert.deepEqual(byName("tasks_created", "COMPLETE"), [
        [iso(T0), 3],
        [iso(T0 + 60_000), 1],
      ]);
      assert.deepEqual(byName("tasks_created", "CANCELLED"), [
        [iso(T0), 0],
        [iso(T0 + 60_000), 0],
      ]);
      assert.deepEqual(byName("task_duration_p50"), [
        [iso(T0), 250],
        [iso(T0 + 60_000), 50],
      ]);
      assert.deepEqual(byName("cpu_cores"), [
        [iso(T0), 2.5],
        [iso(T0 + 60_000), null],
      ]);
    });

    test("pool samples: one row per pool and interval across coordinators; pools from agents' rounds; pruning", async () => {
      const round = (agentId: string, pool: string, cpu: number): AgentMetricsMessage => ({
        agentId,
        pool,
        at: 0,
        intervalMs: 10_000,
        allocated: { containers: 1, cpuCores: 2, memoryBytes: 1 << 30, gpus: 1 },
        containers: [
          {
            containerId: `c-${agentId}`,
            cpuCores: cpu,
            memoryBytes: 512,
            cpuLimitCores: 2,
            memoryLimitBytes: 1 << 30,
          },
        ],
      });
      const now = T0 + 2 * 3_600_000 + 1_000;
      const latest = new Map([
        ["a1", { round: round("a1", "gpu", 1.5), receivedAt: now - 1_000 }],
        ["a2", { round: round("a2", "gpu", 0.5), receivedAt: now - 2_000 }],
        // stale: its capacity counts, its allocation does not
        ["a3", { round: round("a3", "cpu", 9), receivedAt: now - 60_000 }],
      ]);
      const agents = [
        liveAgent("a1", 8, 2),
        liveAgent("a2", 8, 2),
        liveAgent("a3", 4, 0),
        liveAgent("a4", 2, 0),
      ];
      const log = { warn: () => {}, info: () => {} };
      const make = (coordinatorId: string) =>
        new PoolSampler({
          repo: store.metrics,
          agents: () => agents,
          latest: (id) => latest.get(id),
          coordinatorId,
          clock: () => now,
          retentionMs: 3_600_000,
          log,
        });
      const [one, two] = [make("coord-1"), make("coord-2")];
      const wrote = await Promise.all([one.tick(), two.tick()]);
      assert.deepEqual(wrote.flat().sort(), ["cpu", "default", "gpu"], "each pool written once in all");
      const range = { fromMs: now - 60_000, toMs: now + 60_000, stepMs: 120_000 };
      const rows = await store.metrics.poolSeries(range);
      const gpu = rows.find((x) => x.pool === "gpu");
      assert.deepEqual(
        { ...gpu },
        {
          pool: "gpu",
          bucket: 0,
          agents: 2,
          cpuCapacityCores: 16,
          cpuAllocatedCores: 4,
          cpuUsedCores: 2,
          memoryCapacityBytes: 16 * 2 ** 30,
          memoryAllocatedBytes: 2 * 2 ** 30,
          memoryUsedBytes: 1024,
          gpuCapacity: 4,
          gpuAllocated: 2,
        },
      );
      const cpu = rows.find((x) => x.pool === "cpu");
      assert.equal(cpu?.cpuAllocatedCores, 0);
      assert.equal(cpu?.cpuCapacityCores, 4);
      assert.equal(rows.find((x) => x.pool === "default")?.agents, 1);
      assert.deepEqual(await store.metrics.poolSeries(range, ["cpu"]).then((r) => r.map((x) => x.pool)), [
        "cpu",
      ]);
      assert.deepEqual(await store.metrics.poolNames(range), ["cpu", "default", "gpu"]);

      // The sampler pruned what is older than an hour (the container samples at T0).
      const left = await store.db.selectFrom("container_samples").select("at_ms").execute();
      assert.ok(
        left.every((r) => Number(r.at_ms) >= now - 3_600_000),
        "old container samples pruned",
      );
      assert.equal(left.length, 0);
    });
  });
}

describe("metrics ingest over NATS", () => {
  const cleanups: (() => unknown)[] = [];
  const hooks = { after: (fn: () => unknown) => cleanups.push(fn) };
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  test("rounds are stored once across two coordinators; each keeps the latest; a round for another agent's subject is refused", async () => {
    const nats = await startTestNats(hooks);
    const store = await Store.open(`sqlite:${tempDir(hooks)}/b.db`);
    hooks.after(() => store.close());
    const warnings: string[] = [];
    const log = { warn: (_o: unknown, msg?: string) => warnings.push(msg ?? "") };
    const conns = await Promise.all(
      [nats.coordinator, nats.coordinator, nats.agent].map((c) =>
        connect({ servers: c.url, user: c.user, pass: c.password }),
      ),
    );
    hooks.after(() => Promise.all(conns.map((c) => c.close())));
    const [c1, c2, agent] = conns as [(typeof conns)[0], (typeof conns)[0], (typeof conns)[0]];
    let clock = T0;
    const ingests = [c1, c2].map(
      (nc) => new MetricsIngest({ nats: nc, repo: store.metrics, log, clock: () => clock++ }),
    );
    for (const i of ingests) i.start();
    hooks.after(() => Promise.all(ingests.map((i) => i.stop())));
    await Promise.all([c1.flush(), c2.flush()]);

    const round: AgentMetricsMessage = {
      agentId: "agent-7",
      pool: "default",
      at: Date.now(),
      intervalMs: 10_000,
      allocated: { containers: 2, cpuCores: 3, memoryBytes: 2048, gpus: 2 },
      containers: [
        {
          containerId: "ctr-1",
          workspaceId: "ws-x",
          stubId: "stub-x",
          cpuCores: 1.25,
          memoryBytes: 1000,
          cpuLimitCores: 2,
          memoryLimitBytes: 1024,
        },
        {
          containerId: "ctr-2",
          cpuCores: 0.5,
          memoryBytes: 10,
          cpuLimitCores: 1,
          memoryLimitBytes: 1024,
          gpus: [
            { uuid: "GPU-a", utilizationPercent: 30, memoryUsedBytes: 100 },
            { uuid: "GPU-b", utilizationPercent: 50, memoryUsedBytes: 300 },
          ],
        },
      ],
    };
    agent.publish(subjects.metrics("agent-7"), JSON.stringify(round));
    agent.publish(subjects.metrics("agent-8"), JSON.stringify(round));
    await agent.flush();
    await waitFor(() => ingests.every((i) => i.latest("agent-7")), {
      timeoutMs: 5000,
      what: "both coordinators to see the round",
    });
    await waitFor(
      async () => (await store.db.selectFrom("container_samples").selectAll().execute()).length >= 2,
      {
        timeoutMs: 5000,
        what: "samples stored",
      },
    );
    await Promise.all(ingests.map((i) => i.flushed()));
    const rows = await store.db.selectFrom("container_samples").selectAll().orderBy("container_id").execute();
    assert.equal(rows.length, 2, "one coordinator of the queue group stored the round");
    assert.equal(rows[0]?.workspace_id, "ws-x");
    assert.equal(rows[0]?.cpu_cores, 1.25);
    assert.equal(rows[1]?.gpu_count, 2);
    assert.equal(rows[1]?.gpu_utilization, 40);
    assert.equal(Number(rows[1]?.gpu_memory_bytes), 400);
    assert.equal(ingests[0]?.latest("agent-8"), undefined, "a round on another agent's subject is refused");
    assert.ok(warnings.some((w) => w.includes("bad metrics round")));
  });
});
