// A sandbox's or pod's workspace bridge (TaskRunners.openWorkspace): the
// socket answers state and output calls (here 503 until the agent has NATS)
// and has no task routes, and RunnerBridges refuses it on an agent without
// task runners. The relayed round trip is in test/e2e/sandbox-bridge.test.ts.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { RunnerBridges } from "../../agent/host/runner.ts";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import { tempDir } from "../helpers/env.ts";
import { post } from "./helpers.ts";

test("a workspace bridge serves state and outputs but no task routes", async (t) => {
  const runners = new TaskRunners({ kill: async () => {} });
  t.after(() => runners.stop());
  const dir = tempDir(t);
  const bridges = new RunnerBridges(dir, runners);
  const bridgeDir = await bridges.openWorkspace("sb-1", "ws-a");
  assert.ok(bridgeDir);
  const sock = join(bridgeDir, "agent.sock");
  for (const path of ["/v1/tasks/next", "/v1/tasks/t-1/result", "/v1/tasks/results"]) {
    const r = await post(sock, path);
    assert.equal(r.status, 404, path);
    assert.deepEqual(r.body, {
      error: { code: "route_not_found", message: `no route POST ${path} (this container takes no tasks)` },
    });
  }
  const state = await post(sock, "/v1/state", { op: "queue.size", name: "q" });
  assert.equal(state.status, 503);
  const output = await post(sock, "/v1/outputs/o-1/stat");
  assert.equal(output.status, 503);
  await bridges.close("sb-1");
  await assert.rejects(post(sock, "/v1/state", {}), /ENOENT|ECONNREFUSED/);
  // An agent not joined to a coordinator runs the sandbox without the socket rather than refusing it.
  const unjoined = tempDir(t);
  assert.equal(await new RunnerBridges(unjoined, undefined).openWorkspace("sb-2", "ws-a"), undefined);
  assert.ok(!existsSync(join(unjoined, "sb-2")), "no bridge directory without a bridge");
});
