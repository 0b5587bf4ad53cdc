import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { connect, StringCodec } from "nats";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import { freePort, waitFor } from "../../shared/net.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { type ContainerLogBatch, streams, subjects } from "../../shared/subjects.ts";
import { type CliProcess, spawnCli, startTestCluster } from "../helpers/cluster.ts";
import { needs } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import { testNames } from "../network/helpers.ts";

test("a joined agent publishes container log lines to JetStream and exit events over NATS", async (t) => {
  if (
    !needs(t, {
      root: true,
      commands: ["nats-server", "runc", "skopeo", "umoci", "docker-registry", "ip", "nft"],
    })
  )
    return;
  const names = await testNames();
  const dataDir = mkdtempSync(join(tmpdir(), "berth-agent-ev-"));
  let client: AgentRpcClient | undefined;
  let agent: CliProcess | undefined;
  // t.after hooks run in the order they were added: this one must run first,
  // while the agent still answers, so it is added before anything else.
  t.after(async () => {
    for (const ctr of (await client?.listContainers().catch(() => [])) ?? []) {
      await client?.stopContainer(ctr.id, { graceMs: 1000, remove: true }).catch(() => {});
    }
    client?.close();
    await agent?.stop();
    await cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: names.namePrefix }).network);
    rmSync(dataDir, { recursive: true, force: true });
  });
  const c = await startTestCluster(t, { heartbeatIntervalMs: 1000 });
  const port = await freePort();
  agent = spawnCli(t, [
    ...["agent", "--coordinator", c.url, "--join-token", c.joinToken, "--data-dir", dataDir],
    ...["--grpc-host", "127.0.0.1", "--grpc-port", String(port), "--advertise", `127.0.0.1:${port}`],
    ...["--network-prefix", names.namePrefix, "--subnet4", names.subnet4, "--subnet6", names.subnet6],
  ]);
  client = new AgentRpcClient({ address: `unix://${join(dataDir, "agent.sock")}` });
  const registry = await startTestRegistry(t);
  const ref = await pushTestImage(registry);
  await waitFor(
    () => existsSync(join(dataDir, "agent.sock")) && agent.output().includes("connected to NATS"),
    {
      timeoutMs: 60_000,
      what: "the agent to join and connect",
    },
  ).catch((e) => {
    throw new Error(`${e.message}\n${agent.output()}`);
  });

  const nc = await connect({ servers: c.nats.url, user: "coordinator", pass: c.nats.coordinator.password });
  t.after(() => closeNats(nc));
  const sc = StringCodec();
  const exitEvent = new Promise<Record<string, unknown>>((resolve) => {
    const sub = nc.subscribe(subjects.allContainerEvents);
    void (async () => {
      for await (const m of sub) {
        const e = JSON.parse(sc.decode(m.data)) as Record<string, unknown>;
        if (e.containerId === "ctr-events" && e.type === "exit") return resolve(e);
      }
    })();
  });
  await nc.flush();

  const agentId = (await client.health()).agentId;
  await client.runContainer({
    id: "ctr-events",
    image: ref,
    args: ["python3", "-c", "print('hello from a container'); import sys; sys.exit(4)"],
    cpu: 0.5,
    memoryBytes: 64 * 1024 * 1024,
    labels: { purpose: "test" },
  });
  const ev = await exitEvent;
  assert.equal(ev.agentId, agentId);
  assert.equal(ev.exitCode, 4);
  assert.equal(ev.reason, "exited");
  assert.deepEqual(ev.labels, { purpose: "test" });

  const jsm = await nc.jetstreamManager();
  const msg = await waitFor(
    () =>
      jsm.streams.getMessage(streams.logs.name, {
        last_by_subj: subjects.containerLogs(agentId, "_", "_", "ctr-events", "_"),
      }),
    { timeoutMs: 10_000, what: "the log batch in JetStream" },
  );
  const batch = JSON.parse(sc.decode(msg.data)) as ContainerLogBatch;
  assert.deepEqual(
    [batch.containerId, batch.workspaceId, batch.taskId, batch.lines.map((l) => [l.stream, l.line])],
    ["ctr-events", "", null, [["stdout", "hello from a container"]]],
  );
});
