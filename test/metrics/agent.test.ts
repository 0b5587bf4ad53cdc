// The agent's metrics: cgroup v1 and v2 reading (fixture trees), GPU usage
// from a fake nvidia-smi (a script answering the usage query from a file),
// the sampler's CPU-over-interval arithmetic, /metrics over a real socket,
// and a real runc container's cgroup.

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { test } from "node:test";
import {
  AgentMetricsRegistry,
  GpuUsageReader,
  MetricsSampler,
  parseGpuUsageCsv,
  readCgroupSample,
  type SampledContainer,
  startMetricsServer,
} from "../../agent/metrics/index.ts";
import type { CgroupLayout } from "../../agent/runtime/index.ts";
import { sleep } from "../../shared/net.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { py, runtimeHarness } from "../runtime/harness.ts";
import { parseProm } from "./prom-text.ts";

const MiB = 1024 * 1024;

function v2Tree(t: { after: (fn: () => void) => void }, files: Record<string, string>): CgroupLayout {
  const root = tempDir(t, "berth-cg2-");
  mkdirSync(join(root, "berth", "c1"), { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(root, "berth", "c1", name), text);
  return { version: 2, unifiedMount: root, controllers: new Map(), swapAccounting: true };
}

function v1Tree(
  t: { after: (fn: () => void) => void },
  files: Record<string, Record<string, string>>,
): CgroupLayout {
  const root = tempDir(t, "berth-cg1-");
  const controllers = new Map<string, string>();
  for (const [controller, entries] of Object.entries(files)) {
    const mount = join(root, controller);
    mkdirSync(join(mount, "berth", "c1"), { recursive: true });
    controllers.set(controller, mount);
    for (const [name, text] of Object.entries(entries)) writeFileSync(join(mount, "berth", "c1", name), text);
  }
  return { version: 1, unifiedMount: "", controllers, swapAccounting: false };
}

test("cgroup v2: cpu.stat usage_usec and memory.current less inactive_file", (t) => {
  const cg = v2Tree(t, {
    "cpu.stat": "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
    "memory.current": `${300 * MiB}\n`,
    "memory.stat": `anon ${100 * MiB}\nfile ${200 * MiB}\nactive_file ${80 * MiB}\ninactive_file ${120 * MiB}\n`,
  });
  assert.deepEqual(readCgroupSample(cg, "/berth/c1"), {
    cpuUsageNs: 2_500_000_000,
    memoryBytes: 180 * MiB,
    memoryUsageBytes: 300 * MiB,
  });
  assert.throws(() => readCgroupSample(cg, "/berth/gone"), /ENOENT/);
});

test("cgroup v1: cpuacct.usage (cpu,cpuacct mount too) and usage_in_bytes less total_inactive_file", (t) => {
  const files = {
    memory: {
      "memory.usage_in_bytes": `${64 * MiB}\n`,
      "memory.stat": `cache ${40 * MiB}\ninactive_file 1\ntotal_inactive_file ${16 * MiB}\n`,
    },
  };
  const separate = v1Tree(t, { ...files, cpuacct: { "cpuacct.usage": "123456789\n" } });
  assert.deepEqual(readCgroupSample(separate, "/berth/c1"), {
    cpuUsageNs: 123_456_789,
    memoryBytes: 48 * MiB,
    memoryUsageBytes: 64 * MiB,
  });
  // Only a "cpu" mount (cpu,cpuacct combined, found as cpu first): cpuacct.usage is read there.
  const combined = v1Tree(t, { ...files, cpu: { "cpuacct.usage": "5\n" } });
  assert.equal(readCgroupSample(combined, "/berth/c1").cpuUsageNs, 5);
});

test("nvidia-smi usage CSV: [N/A] reads as null, malformed lines are named", () => {
  const m = parseGpuUsageCsv("GPU-aaa, 87, 40536\nGPU-bbb, [N/A], [N/A]\n\n");
  assert.deepEqual(m.get("GPU-aaa"), { utilizationPercent: 87, memoryUsedBytes: 40536 * MiB });
  assert.deepEqual(m.get("GPU-bbb"), { utilizationPercent: null, memoryUsedBytes: null });
  assert.throws(() => parseGpuUsageCsv("GPU-aaa, 87\n"), /line 1 is not/);
});

/** A fake nvidia-smi answering exactly the usage query from $FAKE_USAGE (or failing with exit 9). */
function fakeSmi(t: { after: (fn: () => void) => void }): { bin: string; csv: string } {
  const dir = tempDir(t, "berth-fakesmi-");
  const bin = join(dir, "bin");
  mkdirSync(bin);
  const csv = join(dir, "usage.csv");
  writeFileSync(
    join(bin, "nvidia-smi"),
    `#!/bin/sh
if [ "$1" = "--query-gpu=uuid,utilization.gpu,memory.used" ] && [ "$2" = "--format=csv,noheader,nounits" ] && [ $# -eq 2 ]; then
  if [ -f "$FAKE_USAGE" ]; then cat "$FAKE_USAGE"; exit 0; fi
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." ; exit 9
fi
echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2
`,
  );
  chmodSync(join(bin, "nvidia-smi"), 0o755);
  return { bin, csv };
}

test("GPU usage reader: one call for all GPUs; absent nvidia-smi; a failing driver gives the reason", async (t) => {
  const { bin, csv } = fakeSmi(t);
  writeFileSync(csv, "GPU-1, 10, 100\nGPU-2, 90, 2000\n");
  const env = { PATH: `${bin}:/usr/bin:/bin`, FAKE_USAGE: csv };
  const ok = await new GpuUsageReader({ env }).read();
  assert.ok(ok !== "absent" && ok.ok);
  assert.equal(ok.gpus.get("GPU-2")?.utilizationPercent, 90);
  assert.equal(await new GpuUsageReader({ env: { PATH: tempDir(t) } }).read(), "absent");
  const failing = await new GpuUsageReader({ env: { ...env, FAKE_USAGE: join(bin, "none") } }).read();
  assert.ok(failing !== "absent" && !failing.ok);
  assert.match(failing.reason, /exited with 9: NVIDIA-SMI has failed/);
});

test("sampler: cores over the interval, labels, GPUs per container, registry served on /metrics over a socket", async (t) => {
  const cg = v2Tree(t, {
    "cpu.stat": "usage_usec 1000000\n",
    "memory.current": `${50 * MiB}\n`,
    "memory.stat": `inactive_file ${10 * MiB}\n`,
  });
  const { bin, csv } = fakeSmi(t);
  writeFileSync(csv, "GPU-1, 75, 1024\nGPU-9, 5, 1\n");
  let now = 100_000;
  const registry = new AgentMetricsRegistry({ agent: "agent-1", pool: "gpu" }, false);
  const published: unknown[] = [];
  const sampler = new MetricsSampler({
    agentId: "agent-1",
    pool: "gpu",
    cgroups: cg,
    clock: () => now,
    containers: async (): Promise<SampledContainer[]> => [
      {
        id: "c1",
        labels: { [RunnerLabels.workspaceId]: "ws-1", [RunnerLabels.stubId]: "stub-1" },
        gpus: ["GPU-1"],
        cpu: 2,
        memoryBytes: 512 * MiB,
        startedAt: 98_000,
        cgroupsPath: "/berth/c1",
      },
      { id: "gone", labels: {}, gpus: [], cpu: 1, memoryBytes: MiB, cgroupsPath: "/berth/gone" },
    ],
    gpus: new GpuUsageReader({ env: { PATH: `${bin}:/usr/bin:/bin`, FAKE_USAGE: csv } }),
    capacity: async () => ({ cpuCores: 16, memoryBytes: 64 * 1024 * MiB, gpus: 2 }),
    registry,
    publish: (r) => published.push(r),
  });
  const first = await sampler.sample();
  // 1 s of CPU since start 2 s ago.
  assert.equal(first.containers[0]?.cpuCores, 0.5);
  writeFileSync(join(cg.unifiedMount, "berth", "c1", "cpu.stat"), "usage_usec 16000000\n");
  now += 10_000;
  const second = await sampler.sample();
  assert.deepEqual(second, {
    agentId: "agent-1",
    pool: "gpu",
    at: 110_000,
    intervalMs: 10_000,
    allocated: { containers: 1, cpuCores: 2, memoryBytes: 512 * MiB, gpus: 1 },
    containers: [
      {
        containerId: "c1",
        workspaceId: "ws-1",
        stubId: "stub-1",
        cpuCores: 1.5,
        memoryBytes: 40 * MiB,
        cpuLimitCores: 2,
        memoryLimitBytes: 512 * MiB,
        gpus: [{ uuid: "GPU-1", utilizationPercent: 75, memoryUsedBytes: 1024 * MiB }],
      },
    ],
  });
  assert.equal(published.length, 2);

  const server = await startMetricsServer({ host: "127.0.0.1", port: 0, registry });
  t.after(() => server.close());
  const get = (path: string) =>
    new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
      request({ host: "127.0.0.1", port: server.port, path }, (res) => {
        let body = "";
        res.on("data", (d: Buffer) => {
          body += d.toString();
        });
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, type: String(res.headers["content-type"]), body }),
        );
      })
        .on("error", reject)
        .end();
    });
  const r = await get("/metrics");
  assert.equal(r.status, 200);
  assert.match(r.type, /^text\/plain; version=0\.0\.4/);
  const samples = parseProm(r.body);
  const one = (name: string, labels: Record<string, string> = {}) =>
    samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  const labels = { container: "c1", stub: "stub-1", workspace: "ws-1", agent: "agent-1", pool: "gpu" };
  assert.deepEqual(
    one("berth_container_cpu_cores").map((s) => [s.labels, s.value]),
    [[labels, 1.5]],
  );
  assert.equal(one("berth_container_memory_bytes")[0]?.value, 40 * MiB);
  assert.equal(one("berth_container_gpu_utilization_percent", { gpu: "GPU-1" })[0]?.value, 75);
  assert.equal(one("berth_agent_capacity", { resource: "cpu_cores" })[0]?.value, 16);
  assert.equal(one("berth_agent_allocated", { resource: "gpus" })[0]?.value, 1);
  assert.equal(one("berth_agent_containers")[0]?.value, 1);
  assert.equal((await get("/other")).status, 404);
});

test("a real runc container: its cgroup reads as CPU in use and memory", async (t) => {
  if (!needs(t, { root: true, commands: ["runc"] })) return;
  const h = await runtimeHarness(t);
  const spec = h.spec(py("import time\nx = bytearray(32 * 1024 * 1024)\nwhile True: pass"), { cpu: 1 });
  await h.rt.run(spec);
  const sampler = new MetricsSampler({
    agentId: "agent-rt",
    cgroups: h.rt.cgroups,
    containers: async () => [
      {
        id: spec.id,
        labels: {},
        gpus: [],
        cpu: 1,
        memoryBytes: spec.memoryBytes ?? 0,
        cgroupsPath: h.rt.cgroupsPath(spec.id),
      },
    ],
  });
  await sampler.sample();
  await sleep(1500);
  const round = await sampler.sample();
  const c = round.containers[0];
  assert.ok(c, "the running container was sampled");
  assert.ok(c.cpuCores > 0 && c.cpuCores <= 1.2, `a busy loop capped at 1 core used ${c.cpuCores} cores`);
  assert.ok(c.memoryBytes >= 32 * MiB, `working set ${c.memoryBytes} holds the 32 MiB buffer`);
  await h.rt.stop(spec.id, { graceMs: 100 });
});
