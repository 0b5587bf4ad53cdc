// Which agents an agent asks for layers (docs/images.md, "Layers from
// peers"): over a real nats-server, an agent's request on its own
// layer-peers subject is answered by the coordinator's images area with the
// other ready agents that run a tunnel, never the asker itself.

import assert from "node:assert/strict";
import { test } from "node:test";
import { askLayerPeers } from "../../agent/images/index.ts";
import { serveLayerPeers } from "../../coordinator/images/layer-peers.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";

test("an agent learns its peers' tunnels from the coordinators", async (t) => {
  const nats = await startTestNats(t);
  const coordinator = await connectTestNats(t, nats, "coordinator");
  const agent = await connectTestNats(t, nats, "agent");
  const fleet = fleetOf([
    ["agent-a", capacity(2, 4), { proxyAddress: "10.0.0.1:7001" }],
    ["agent-b", capacity(2, 4), { proxyAddress: "10.0.0.2:7001" }],
    ["agent-c", capacity(2, 4), { proxyAddress: "10.0.0.3:7001" }],
    ["agent-edge", capacity(2, 4)],
  ]);
  const stop = serveLayerPeers(coordinator, () => fleet.ready());
  t.after(stop);
  await coordinator.flush();
  assert.deepEqual(await askLayerPeers(agent, "agent-b"), [
    { agentId: "agent-a", address: "10.0.0.1:7001" },
    { agentId: "agent-c", address: "10.0.0.3:7001" },
  ]);
  // An agent that left (goodbye) is no longer offered.
  fleet.leave("agent-c");
  assert.deepEqual(await askLayerPeers(agent, "agent-a"), [{ agentId: "agent-b", address: "10.0.0.2:7001" }]);
});
