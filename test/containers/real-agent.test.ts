// The container manager against a real agent container host (runc, real
// image pulled from a local registry) over the agent's real gRPC unix socket:
// a container starts for demand, is replaced after it dies, and is stopped
// and removed once idle past keep_warm_seconds.

import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { ContainerManager } from "../../coordinator/containers/manager.ts";
import { runnerRequest } from "../../coordinator/containers/runner-request.ts";
import { waitFor } from "../../shared/net.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { needs } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { HOST_COMMANDS } from "../host/harness.ts";
import { FakeActivity, capacity, oneAgentFleet, stubRecord } from "./fakes.ts";

const AGENT = "agent-real";

test("a real agent runs containers for demand and stops them after keep-warm", async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const { h, client } = await realAgent(t);

  const fleet = oneAgentFleet(AGENT, capacity(2, 4));
  const activity = new FakeActivity();
  const stub = stubRecord("stub-real", {
    config: { keep_warm_seconds: 2, runtime: { cpu: 0, gpu: "", memory: 64, image_id: "" } },
    extra: { cpu_millicores: 500, image_ref: h.imageRef },
  });

  // The agent's exit events, as the agent would publish them on NATS.
  let deliver: ((e: ContainerEventMessage) => void) | undefined;
  let forwarded = 0;
  const bridge = setInterval(() => {
    for (; forwarded < h.events.length; forwarded++) {
      const e = h.events[forwarded];
      if (e?.type !== "exit") continue;
      deliver?.({
        agentId: AGENT,
        containerId: e.containerId,
        type: "exit",
        at: e.at,
        labels: e.status.labels,
        ...(e.status.exitCode !== undefined ? { exitCode: e.status.exitCode } : {}),
        ...(e.status.reason ? { reason: e.status.reason } : {}),
      });
    }
  }, 50);
  t.after(() => clearInterval(bridge));

  const mgr = new ContainerManager({
    fleet,
    activity,
    stubs: { get: async (id) => (id === stub.id ? stub : undefined) },
    workspaceLimit: async () => 5,
    code: {
      open: () => {
        throw new Error("no code in this test");
      },
    },
    agents: { client: () => client },
    events: {
      subscribe: (handler) => {
        deliver = handler;
        return () => {
          deliver = undefined;
        };
      },
    },
    log: pino({ level: "silent" }),
    reconcileIntervalMs: 200,
    healthyAfterMs: 1,
    // Runner containers are the agent's business; a plain sleeping container stands in.
    containerRequest: (s, id, gpuType) => {
      const { runner: _runner, code: _code, ...req } = runnerRequest(s, id, gpuType);
      return { ...req, args: ["sleep", "600"] };
    },
  });
  const managed = async () =>
    (await client.listContainers({ labels: { [RunnerLabels.managed]: "1" } })).filter(
      (c) => c.state === "running",
    );

  mgr.start();
  try {
    activity.set(stub.id, 1);
    const [first] = await waitFor(async () => ((await managed()).length === 1 ? managed() : undefined), {
      timeoutMs: 120_000,
      intervalMs: 200,
      what: "a running container for the stub",
    });
    assert.ok(first);
    assert.equal(first.labels[RunnerLabels.stubId], stub.id);
    assert.equal(first.cpu, 0.5);
    assert.equal(first.memoryBytes, 64 * 1024 * 1024);
    assert.deepEqual(
      mgr.list().map((c) => [c.id, c.state]),
      [[first.id, "running"]],
    );

    // It dies under the task: removed from the agent, and a new one takes its place.
    await h.host.stopContainer(first.id, { graceMs: 0 });
    const [second] = await waitFor(
      async () => {
        const now = await managed();
        return now.length === 1 && now[0]?.id !== first.id ? now : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: "a replacement container" },
    );
    assert.ok(second);
    await waitFor(async () => !(await client.listContainers()).some((c) => c.id === first.id), {
      timeoutMs: 30_000,
      what: "the dead container removed from the agent",
    });

    // The task finished; after keep_warm_seconds the idle container goes away.
    activity.set(stub.id, 0);
    await waitFor(async () => (await client.listContainers()).length === 0, {
      timeoutMs: 60_000,
      intervalMs: 200,
      what: "the idle container stopped and removed",
    });
    assert.equal(mgr.activeContainers(stub.id), 0);
  } finally {
    await mgr.stop();
  }
  assert.deepEqual(await client.listContainers(), []);
});
