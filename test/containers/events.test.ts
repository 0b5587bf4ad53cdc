// Container events over a real nats-server: what agents publish reaches the
// manager's handler; malformed messages are dropped; unsubscribe stops it.

import assert from "node:assert/strict";
import { test } from "node:test";
import { connect } from "nats";
import pino from "pino";
import { natsContainerEvents } from "../../coordinator/containers/events.ts";
import { waitFor } from "../../shared/net.ts";
import { type ContainerEventMessage, subjects } from "../../shared/subjects.ts";
import { needs } from "../helpers/env.ts";
import { startTestNats } from "../helpers/nats.ts";

test("container events from agents reach the subscriber", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const nats = await startTestNats(t);
  const coord = await connect({
    servers: nats.url,
    user: nats.coordinator.user,
    pass: nats.coordinator.password,
  });
  t.after(() => coord.close());
  const agent = await connect({ servers: nats.url, user: nats.agent.user, pass: nats.agent.password });
  t.after(() => agent.close());

  const got: ContainerEventMessage[] = [];
  const unsubscribe = natsContainerEvents(coord, pino({ level: "silent" })).subscribe((e) => got.push(e));
  await coord.flush();
  const exit: ContainerEventMessage = {
    agentId: "agent-1",
    containerId: "ctr-1",
    type: "exit",
    at: 1,
    exitCode: 137,
    reason: "oom_killed",
    labels: { "berth.managed": "1" },
  };
  agent.publish(subjects.containerEvent("agent-1", "ctr-0"), new TextEncoder().encode("not json"));
  agent.publish(subjects.containerEvent("agent-1", "ctr-1"), new TextEncoder().encode(JSON.stringify(exit)));
  const { labels: _labels, ...noLabels } = { ...exit, containerId: "ctr-2" };
  agent.publish(
    subjects.containerEvent("agent-1", "ctr-2"),
    new TextEncoder().encode(JSON.stringify(noLabels)),
  );
  await waitFor(() => got.length === 2, { what: "two events" });
  assert.deepEqual(got[0], exit);
  assert.deepEqual(got[1], { ...noLabels, labels: {} }, "missing labels become empty");

  unsubscribe();
  await coord.flush();
  agent.publish(subjects.containerEvent("agent-1", "ctr-3"), new TextEncoder().encode(JSON.stringify(exit)));
  await agent.flush();
  await coord.flush();
  assert.equal(got.length, 2);
});
