// A GPU host's telemetry and health from agent to coordinator, over a real
// NATS server: the agent's probe, monitor and sampler read the fake
// nvidia-smi (an 8×H100 host) and a kernel log holding an XID 48 for GPU 3;
// its heartbeat and metrics round go out on NATS; the coordinator's fleet
// watcher, metrics ingest and /metrics registry take them in. GPU 3 is
// drained with the reason in the agent list, a GPU health change is
// announced, and every GPU's figures appear under DCGM's names.

import assert from "node:assert/strict";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import pino from "pino";
import { GpuHealth, GpuMonitor } from "../../agent/capacity/gpu-health.ts";
import { NvidiaGpuProbe } from "../../agent/capacity/gpu-probe.ts";
import { GpuTelemetryReader } from "../../agent/capacity/gpu-telemetry.ts";
import { GpuWatcher } from "../../agent/capacity/gpu-watcher.ts";
import { KernelLogXidReader } from "../../agent/capacity/xid.ts";
import { MetricsSampler } from "../../agent/metrics/index.ts";
import { FleetView, FleetWatcher, type GpuHealthChange } from "../../coordinator/fleet/index.ts";
import { agentJson } from "../../coordinator/fleet/routes.ts";
import { agentGpus, CoordinatorMetrics, MetricsIngest } from "../../coordinator/metrics/index.ts";
import { Store } from "../../coordinator/records.ts";
import type { Heartbeat } from "../../shared/fleet.ts";
import { subjects } from "../../shared/subjects.ts";
import { FIXTURES, fakeBin, fakeEnv, listingDevDir } from "../capacity/fake-nvidia.ts";
import { tempDir } from "../helpers/env.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";
import { waitUntil } from "../helpers/wait.ts";
import { parseProm } from "./prom-text.ts";

const BOOT = Date.parse("2026-11-26T08:00:00.000Z");
const AGENT = "agt-gpu-1";
const GPU3 = "GPU-b37523a5-3b4a-4ee2-8463-513755ac0ecd";

test("an XID on one GPU drains it in the agent list, announces it, and every GPU reaches /metrics", async (t) => {
  const log = pino({ level: "silent" });
  const nats = await startTestNats(t);
  const coordinatorNc = await connectTestNats(t, nats, "coordinator");
  const agentNc = await connectTestNats(t, nats, "agent");

  // The coordinator: store, fleet view and watcher, metrics ingest and registry.
  const store = await Store.open(`sqlite:${tempDir(t)}/c.db`);
  t.after(() => store.close());
  await store.agents.upsertJoin({
    id: AGENT,
    hostname: "gpu-host-1",
    version: "test",
    grpcAddress: "10.0.0.9:7443",
  });
  const fleet = new FleetView();
  const health: GpuHealthChange[] = [];
  fleet.onGpuHealth((c) => health.push(c));
  const watcher = new FleetWatcher(coordinatorNc, fleet, store.agents, log);
  watcher.start();
  t.after(() => watcher.stop());
  const ingest = new MetricsIngest({ nats: coordinatorNc, repo: store.metrics, log });
  ingest.start();
  t.after(() => ingest.stop());
  const prometheus = new CoordinatorMetrics({
    taskCounts: async () => ({}),
    agents: () => [],
    gpus: () => agentGpus(fleet.ready(), (id) => ingest.latest(id)),
    processMetrics: false,
  });
  await coordinatorNc.flush();

  // The agent: probe, health monitor (fake nvidia-smi, kernel log with XID 13 on GPU 0 and 48 on GPU 3), sampler.
  const bin = fakeBin(t, ["nvidia-smi"]);
  const env = fakeEnv(bin, "h100x8");
  const devDir = listingDevDir(t, [
    "nvidiactl",
    "nvidia-uvm",
    ...Array.from({ length: 8 }, (_, i) => `nvidia${i}`),
  ]);
  const kmsg = join(tempDir(t, "berth-kmsg-"), "kmsg");
  copyFileSync(join(FIXTURES, "..", "kmsg", "h100x8-xid.txt"), kmsg);
  const xids = new KernelLogXidReader({ path: kmsg, bootMs: BOOT });
  t.after(() => xids.close());
  let gpu: GpuWatcher | undefined;
  const monitor = new GpuMonitor({
    telemetry: new GpuTelemetryReader({ env }),
    xids,
    health: new GpuHealth({ clock: () => BOOT + 90_000 }),
    onChange: () => gpu?.reassess(),
  });
  gpu = new GpuWatcher({ probe: new NvidiaGpuProbe({ env, devDir }), drained: () => monitor.drained() });
  t.after(() => gpu?.stop());
  await gpu.refresh();
  const sampler = new MetricsSampler({
    agentId: AGENT,
    cgroups: { version: 2, unifiedMount: "/sys/fs/cgroup", controllers: new Map(), swapAccounting: false },
    containers: async () => [],
    gpuTelemetry: monitor,
    publish: (round) => agentNc.publish(subjects.metrics(AGENT), JSON.stringify(round)),
  });
  const heartbeat = async (): Promise<Heartbeat> => ({
    agentId: AGENT,
    hostname: "gpu-host-1",
    version: "test",
    sentAt: Date.now(),
    intervalMs: 5000,
    grpcAddress: "10.0.0.9:7443",
    nodeAddress: "10.0.0.9",
    capacity: {
      cpuCores: 64,
      memoryBytes: 512 * 1024 ** 3,
      disk: { path: "/var/lib/berth", totalBytes: 1e12, freeBytes: 5e11 },
      gpus: await gpu.probe(),
    },
  });

  // Before the monitor's first round: all eight offered.
  agentNc.publish(subjects.heartbeat(AGENT), JSON.stringify(await heartbeat()));
  await waitUntil(() => fleet.get(AGENT) !== undefined, { what: "the first heartbeat" });
  assert.equal(fleet.get(AGENT)?.heartbeat.capacity.gpus.devices.length, 8);
  // The fleet view keeps where other agents' gang tunnels reach this host.
  assert.equal(fleet.get(AGENT)?.heartbeat.nodeAddress, "10.0.0.9");

  // One round: the XID drains GPU 3; the next heartbeat says so.
  const round = await sampler.sample();
  assert.equal(round.gpus?.length, 8);
  agentNc.publish(subjects.heartbeat(AGENT), JSON.stringify(await heartbeat()));
  await waitUntil(() => health.length > 0, { what: "the GPU health change" });
  assert.deepEqual(
    health.map((c) => [c.agentId, c.hostname, c.drained.map((d) => d.uuid), c.restored]),
    [[AGENT, "gpu-host-1", [GPU3], []]],
  );

  // The agent list (what GET /api/v1/agents and `berth agent list` show).
  const listed = agentJson((await store.agents.get(AGENT))!, fleet);
  assert.equal(listed.capacity?.gpus.counts.H100, 7);
  assert.equal(listed.node_address, "10.0.0.9");
  assert.deepEqual(listed.capacity?.gpus.drained, [
    {
      index: 3,
      uuid: GPU3,
      model: "NVIDIA H100 80GB HBM3",
      reason: "XID 48 (double-bit ECC error) logged by the driver",
      since: new Date(BOOT + 86170).toISOString(),
      xid: 48,
    },
  ]);
  // Written to the store at once, so other coordinators list it too.
  await waitUntil(async () => ((await store.agents.get(AGENT))?.capacity?.gpus.drained?.length ?? 0) === 1, {
    what: "the drained GPU in the store",
  });

  // /metrics: DCGM's names and labels for each GPU.
  await waitUntil(() => ingest.latest(AGENT) !== undefined, { what: "the metrics round" });
  const samples = parseProm((await prometheus.render()).body);
  const of = (name: string, gpuIndex: string) =>
    samples.find((s) => s.name === name && s.labels.gpu === gpuIndex && s.labels.Hostname === "gpu-host-1");
  assert.deepEqual(of("DCGM_FI_DEV_GPU_UTIL", "0")?.labels, {
    gpu: "0",
    UUID: "GPU-566bf9d7-c55a-45f8-91a6-e55e9b9b1325",
    device: "nvidia0",
    modelName: "NVIDIA H100 80GB HBM3",
    Hostname: "gpu-host-1",
    pci_bus_id: "00000000:18:00.0",
    agent: AGENT,
  });
  assert.equal(of("DCGM_FI_DEV_GPU_UTIL", "0")?.value, 97);
  assert.equal(of("DCGM_FI_DEV_FB_USED", "0")?.value, 71042);
  assert.equal(of("DCGM_FI_DEV_FB_FREE", "0")?.value, 81559 - 71042);
  assert.equal(of("DCGM_FI_DEV_GPU_TEMP", "0")?.value, 64);
  assert.equal(of("DCGM_FI_DEV_POWER_USAGE", "0")?.value, 612.45);
  assert.equal(of("DCGM_FI_DEV_SM_CLOCK", "0")?.value, 1980);
  assert.equal(of("DCGM_FI_DEV_MEM_CLOCK", "0")?.value, 2619);
  assert.equal(of("DCGM_FI_DEV_XID_ERRORS", "0")?.value, 13);
  assert.equal(of("DCGM_FI_DEV_XID_ERRORS", "3")?.value, 48);
  assert.equal(of("DCGM_FI_DEV_XID_ERRORS", "2")?.value, 0);
  assert.equal(of("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "3")?.value, 1);
  assert.equal(of("berth_gpu_drained", "3")?.value, 1);
  assert.equal(of("berth_gpu_drained", "2")?.value, 0);
  // GPU 6 answers [N/A] for power: no series rather than a made-up zero.
  assert.equal(of("DCGM_FI_DEV_POWER_USAGE", "6"), undefined);
  assert.equal(samples.filter((s) => s.name === "DCGM_FI_DEV_GPU_TEMP").length, 8);
});
