// The agent client pool against a real agent gRPC server over TCP with mutual
// TLS: the coordinator's certificate is accepted, the agent is verified by its
// id, and connections follow the fleet (new address, agent gone).

import assert from "node:assert/strict";
import { test } from "node:test";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { AgentClientPool } from "../../coordinator/containers/agent-clients.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { COORDINATOR_CLIENT_NAME, ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { BerthError } from "../../shared/errors.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { memoryStore } from "../helpers/store.ts";
import { FakeAgent } from "../rpc/fake-agent.ts";
import { capacity } from "./fakes.ts";

test("one mTLS client per agent, redialled when its address changes or it goes away", async (t) => {
  const pki = await ClusterPki.load(memoryStore());
  const agentId = "agent-pool1";
  const containers = new FakeContainerApi({ agentId });
  await containers.runContainer({
    id: "ctr-1",
    args: [],
    cpu: 1,
    memoryBytes: 1,
    labels: { "berth.managed": "1" },
  });
  const start = async () =>
    startAgentRpcServer({
      impl: new FakeAgent(),
      containers,
      tcp: {
        host: "127.0.0.1",
        port: 0,
        // Dialled by IP, verified by agent id: the certificate names only the id.
        tls: { caPem: pki.caPem, ...(await pki.issueAgentCert(agentId)) },
        allowedClientNames: [COORDINATOR_CLIENT_NAME],
      },
    });
  const first = await start();
  t.after(() => first.close());
  const second = await start();
  t.after(() => second.close());

  const fleet = new FleetView();
  const beat = (port: number | undefined) =>
    fleet.observe(
      {
        agentId,
        hostname: "h",
        version: "t",
        sentAt: 0,
        intervalMs: 1000,
        grpcAddress: `127.0.0.1:${port}`,
        capacity: capacity(1, 1),
      },
      Date.now(),
    );
  beat(first.tcpPort);
  const pool = await AgentClientPool.create({ fleet, pki });
  t.after(() => pool.close());

  const c1 = pool.client(agentId);
  assert.deepEqual(
    (await c1.listContainers({ labels: { "berth.managed": "1" } })).map((c) => c.id),
    ["ctr-1"],
  );
  assert.equal(pool.client(agentId), c1, "reused");

  // The agent restarted on another port.
  beat(second.tcpPort);
  const c2 = pool.client(agentId);
  assert.notEqual(c2, c1);
  assert.equal(c2.options.address, `127.0.0.1:${second.tcpPort}`);
  assert.equal((await c2.listContainers()).length, 1);

  pool.release(agentId);
  const c3 = pool.client(agentId);
  assert.notEqual(c3, c2);
  assert.equal((await c3.listContainers()).length, 1);

  assert.throws(
    () => pool.client("agent-unknown"),
    (e: unknown) => e instanceof BerthError && e.code === "unavailable" && /agent-unknown/.test(e.message),
  );
});
