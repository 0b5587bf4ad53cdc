// Why a stub's tasks wait (ContainerManager.waitState, docs/tasks.md "Why a
// task waits"): the real planner over a fake fleet; each state is the
// manager's latest placement outcome, not a guess.

import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import type { ContainerManagerOptions } from "../../coordinator/containers/types.ts";
import type { ContainerLimits } from "../../coordinator/scheduler/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { capacity, stubRecord, world } from "./fakes.ts";

const a100 = (uuid: string) => [{ type: "A100", uuid }];

const none: ContainerLimits = {
  maxContainers: null,
  maxCpuMillicores: null,
  maxMemoryMb: null,
  maxGpus: null,
};

/**
 * One task for each stub, each stub in its own workspace, placed on one agent
 * under workspaceLimits: the agent's container start for a stub.
 */
async function runnersByStub(
  t: TestContext,
  workspaceLimits: ContainerManagerOptions["workspaceLimits"],
  workspaceOf: Record<string, string>,
) {
  const w = world({ workspaceLimits });
  t.after(() => w.mgr.stop());
  const a = w.addAgent("agent-a", capacity(16, 64));
  for (const [stubId, workspaceId] of Object.entries(workspaceOf)) {
    w.stubs.set(stubId, stubRecord(stubId, { workspaceId }));
  }
  for (const [stubId, workspaceId] of Object.entries(workspaceOf)) {
    w.activity.set(stubId, 1, 0, workspaceId);
  }
  await w.tick();
  return (stubId: string) => a.runs.find((r) => r.labels?.[RunnerLabels.stubId] === stubId);
}

test("a GPU type every host of it has in use: no_room naming the type, the count and how many hosts could hold it", async (t) => {
  const w = world();
  t.after(() => w.mgr.stop());
  w.addAgent("gpu-a", capacity(16, 64, a100("GPU-a")));
  w.addAgent("gpu-b", capacity(16, 64, a100("GPU-b")));
  w.addAgent("cpu-c", capacity(64, 256));
  w.stubs.set("stub-gpu", stubRecord("stub-gpu", { extra: { gpu_types: ["A100"], gpu_count: 1 } }));
  w.activity.set("stub-gpu", 3);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-gpu"), 2, "one container per A100");
  const wait = w.mgr.waitState("stub-gpu");
  assert.equal(wait?.kind, "no_room");
  assert.match(
    wait?.message ?? "",
    /every agent is full for cpu=1 memory=512 MiB gpu=1xA100 \(2 of 3 ready agents can hold it when free\)/,
  );
  assert.equal(wait?.since, w.clock.now);

  // The same refusal later keeps its since; demand met clears it.
  await w.tick(5000);
  assert.equal(w.mgr.waitState("stub-gpu")?.since, w.clock.now - 5000);
  w.activity.set("stub-gpu", 0, 2);
  await w.tick();
  assert.equal(w.mgr.waitState("stub-gpu"), undefined);
});

test("a GPU type no host has: the waiting tasks end FAILED naming the type and the fleet's GPUs, and nothing waits", async (t) => {
  const w = world();
  t.after(() => w.mgr.stop());
  w.addAgent("gpu-a", capacity(16, 64, a100("GPU-a")));
  w.stubs.set("stub-h100", stubRecord("stub-h100", { extra: { gpu_types: ["H100"], gpu_count: 2 } }));
  w.activity.set("stub-h100", 2);
  await w.tick();
  assert.equal(w.activity.failed.length, 1);
  assert.equal(w.activity.failed[0]?.code, "unplaceable");
  assert.match(
    w.activity.failed[0]?.message ?? "",
    /no agent has 2 GPU\(s\) of type H100 \(fleet GPUs: 1xA100\)/,
  );
  assert.equal(w.mgr.waitState("stub-h100"), undefined);
});

test("no agent at all: no_agent; a placed container still starting: container_starting naming it and its agent", async (t) => {
  const w = world();
  t.after(() => w.mgr.stop());
  w.stubs.set("stub-1", stubRecord("stub-1"));
  w.activity.set("stub-1", 1);
  await w.tick();
  assert.equal(w.mgr.waitState("stub-1")?.kind, "no_agent");
  assert.match(w.mgr.waitState("stub-1")?.message ?? "", /no agent is ready/);

  const agent = w.addAgent("agent-a", capacity(8, 32));
  let open = () => {};
  agent.gate = new Promise<void>((r) => {
    open = r;
  });
  await w.mgr.reconcile();
  const starting = w.mgr.waitState("stub-1");
  assert.equal(starting?.kind, "container_starting");
  const [c] = w.mgr.containersOf("stub-1");
  assert.ok(c);
  assert.equal(starting?.message, `container ${c.id} is starting on agent agent-a`);
  open();
  await w.mgr.settled();
  assert.equal(w.mgr.containersOf("stub-1")[0]?.state, "running");
  assert.equal(w.mgr.waitState("stub-1"), undefined, "a running container: the tasks are only queued");
});

test("a workspace limit: workspace_limit with the limit's name", async (t) => {
  const w = world({ workspaceLimits: async () => ({ ...none, maxGpus: 1 }) });
  t.after(() => w.mgr.stop());
  w.addAgent("gpu-a", capacity(16, 64, [...a100("GPU-0"), ...a100("GPU-1")]));
  w.stubs.set("stub-gpu", stubRecord("stub-gpu", { extra: { gpu_types: ["A100"], gpu_count: 1 } }));
  w.activity.set("stub-gpu", 2);
  await w.tick();
  assert.equal(w.mgr.activeContainers("stub-gpu"), 1);
  const wait = w.mgr.waitState("stub-gpu");
  assert.equal(wait?.kind, "workspace_limit");
  assert.equal(wait?.limit, "max_gpus");
  assert.match(wait?.message ?? "", /limit max_gpus/);
});

test("a failed start: start_backoff with the attempt count and the error, until the backoff is over", async (t) => {
  const w = world();
  t.after(() => w.mgr.stop());
  const a = w.addAgent("agent-a", capacity(8, 32));
  w.stubs.set("stub-1", stubRecord("stub-1"));
  a.failRun.push(new BerthError("unavailable", "agent busy"));
  w.activity.set("stub-1", 1);
  await w.tick();
  const wait = w.mgr.waitState("stub-1");
  assert.equal(wait?.kind, "start_backoff");
  assert.match(wait?.message ?? "", /waiting to retry a container start \(1 failed round\): .*agent busy/);
  const failedAt = w.clock.now;
  await w.tick(10); // still within the backoff: since stays the failure's time
  assert.equal(w.mgr.waitState("stub-1")?.since, failedAt);
  await w.tick(60_000); // past the backoff: the next start succeeds
  assert.equal(w.mgr.activeContainers("stub-1"), 1);
  assert.equal(w.mgr.waitState("stub-1"), undefined);
});

test("a workspace forced to gVisor: its runner containers start with isolation gvisor, another's do not", async (t) => {
  const byStub = await runnersByStub(
    t,
    async (ws) => ({ ...none, isolation: ws === "ws-untrusted" ? "gvisor" : null }),
    { "stub-u": "ws-untrusted", "stub-t": "ws-trusted" },
  );
  assert.equal(byStub("stub-u")?.isolation, "gvisor", "whatever the stub says");
  assert.equal(byStub("stub-t")?.isolation, undefined);
});

test("a workspace opted out: its runner containers start without a user namespace and with the deny list; another's with the defaults", async (t) => {
  const byStub = await runnersByStub(
    t,
    async (ws) =>
      ws === "ws-legacy"
        ? { ...none, userNamespace: false, syscallFilter: "denylist" }
        : { ...none, userNamespace: true, syscallFilter: "allowlist" },
    { "stub-l": "ws-legacy", "stub-d": "ws-default" },
  );
  assert.equal(byStub("stub-l")?.userNamespace, false);
  assert.equal(byStub("stub-l")?.syscallFilter, "denylist");
  assert.equal(byStub("stub-l")?.isolation, undefined, "an opt-out forces no runtime");
  // The defaults are the agent's own: left out of the request.
  assert.equal(byStub("stub-d") && "userNamespace" in byStub("stub-d")!, false);
  assert.equal(byStub("stub-d") && "syscallFilter" in byStub("stub-d")!, false);
});
