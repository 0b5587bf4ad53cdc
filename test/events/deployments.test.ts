// Deployment changes emitted as events by a real DeploymentService: deploy,
// stop, start (repeated calls that change nothing emit nothing), scaling and
// delete, in order, with their data.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pino from "pino";
import { DeploymentService } from "../../coordinator/deployments/service.ts";
import { deployInput } from "../deployments/helpers.ts";
import { perSuite } from "../helpers/suite.ts";
import { waitUntil } from "../helpers/wait.ts";
import { startEventHarness } from "./helpers.ts";

describe("deployment events", () => {
  const h = perSuite((suite) => startEventHarness(suite));

  test("stub.deploy, deployment.stop/start/scale/delete in order with their data", async (t) => {
    const service = new DeploymentService({
      repo: h.store.deployments,
      tasks: h.tasks,
      log: pino({ level: "silent" }),
      baseUrl: "http://coordinator.test:7070/",
      events: h.emitter.emit,
    });
    await service.open();
    t.after(() => service.close());
    const d = await service.deploy(h.ws.id, deployInput("web", "endpoint"));
    await service.stop(h.ws.id, d.id);
    await service.stop(h.ws.id, d.id);
    await service.start(h.ws.id, d.id);
    service.recordScaling({
      stubId: d.stubId,
      workspaceId: h.ws.id,
      at: Date.now(),
      from: 0,
      to: 2,
      reason: "queue_depth",
      queueDepth: 5,
    });
    await service.delete(h.ws.id, d.id);
    const mine = async () => {
      await h.stream.flush();
      return (await h.stream.history(h.ws.id, { type: "stub.deploy,deployment.*" })).events.filter(
        (e) => e.subject === d.id,
      );
    };
    await waitUntil(async () => (await mine()).length >= 5, { what: "five deployment events" });
    const evs = await mine();
    assert.deepEqual(
      evs.map((e) => e.type),
      ["stub.deploy", "deployment.stop", "deployment.start", "deployment.scale", "deployment.delete"],
    );
    assert.deepEqual(
      { ...evs[0]?.data },
      {
        deployment_id: d.id,
        name: "web",
        kind: "endpoint",
        version: 1,
        stub_id: d.stubId,
        active: true,
        serve: false,
      },
    );
    assert.equal(evs[1]?.data.active, false);
    assert.deepEqual(
      [evs[3]?.data.from, evs[3]?.data.to, evs[3]?.data.reason, evs[3]?.data.queue_depth],
      [0, 2, "queue_depth", 5],
    );
    assert.equal(evs[4]?.data.reason, "deleted");
  });
});
