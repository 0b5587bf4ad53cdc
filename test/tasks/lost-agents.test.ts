// Tasks whose agent is gone (docs/reliability.md "Stuck work"): RUNNING on
// an agent lost past the bound goes to RETRY with reason agent_lost, is run
// again by the next runner, and an outcome the agent reports when it comes
// back still counts. A real task service (nats-server, SQLite) and a real
// FleetView fed heartbeats as the fleet watcher does.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import type { LiveTask } from "../../coordinator/tasks/live-index.ts";
import { tasksOfLostAgents } from "../../coordinator/tasks/lost-agents.ts";
import { stepsFor } from "../../coordinator/tasks/transitions.ts";
import type { TaskEvent } from "../../shared/tasks.ts";
import { waitUntil } from "../helpers/wait.ts";
import { startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "./harness.ts";

const BOUND_MS = 60_000;

function heartbeat(fleet: FleetView, agentId: string, at: number): void {
  fleet.observe(
    {
      agentId,
      hostname: agentId,
      version: "t",
      sentAt: at,
      intervalMs: 1000,
      grpcAddress: "127.0.0.1:1",
      capacity: {
        cpuCores: 1,
        memoryBytes: 1,
        disk: { path: "/", totalBytes: 1, freeBytes: 1 },
        gpus: { available: false, toolkit: false, devices: [] },
      },
    },
    at,
  );
}

test("tasksOfLostAgents: only RUNNING queued tasks of an agent lost or left past the bound", () => {
  const fleet = new FleetView();
  const now = 10_000_000;
  heartbeat(fleet, "gone", now - BOUND_MS - 1);
  heartbeat(fleet, "just-lost", now - BOUND_MS);
  heartbeat(fleet, "left", now - BOUND_MS - 5);
  heartbeat(fleet, "quiet-but-ready", now - BOUND_MS - 1);
  fleet.sweep(now);
  heartbeat(fleet, "quiet-but-ready", now - BOUND_MS - 1); // heard again: ready, though its clock says old
  fleet.leave("left");
  const task = (id: string, agentId: string | null, over: Partial<LiveTask> = {}) =>
    ({ id, status: "RUNNING", agentId, streamSeq: 1, ...over }) as LiveTask;
  const picked = tasksOfLostAgents(
    [
      task("t-gone", "gone"),
      task("t-just", "just-lost"),
      task("t-left", "left"),
      task("t-ready", "quiet-but-ready"),
      task("t-unknown", "never-heard"),
      task("t-direct", "gone", { streamSeq: null }),
      task("t-retry", "gone", { status: "RETRY" }),
      task("t-none", null),
    ],
    fleet,
    now,
    BOUND_MS,
  );
  assert.deepEqual(
    picked.map((p) => [p.task.id, p.state]),
    [
      ["t-gone", "lost"],
      ["t-left", "left"],
    ],
  );
});

test("stepsFor: a lost attempt's late outcome stands; an older or a different one does not", () => {
  const ev = (over: Partial<TaskEvent>) =>
    ({
      type: "finished",
      status: "COMPLETE",
      taskId: "t",
      stubId: "s",
      workspaceId: "w",
      agentId: "a",
      containerId: "c",
      attempt: 1,
      at: 1,
      ...over,
    }) as TaskEvent;
  const s = (steps: { status: string }[]) => steps.map((x) => x.status);
  assert.deepEqual(s(stepsFor({ status: "RETRY", attempt: 1 }, ev({}), 1)), ["RUNNING", "COMPLETE"]);
  assert.deepEqual(
    s(stepsFor({ status: "RETRY", attempt: 1 }, ev({}))),
    [],
    "a RETRY the agent reported: its attempt is over",
  );
  assert.deepEqual(s(stepsFor({ status: "RETRY", attempt: 2 }, ev({}), 2)), [], "an older attempt");
});

describe("a task RUNNING on a lost agent", () => {
  let h: TaskHarness;
  let stubId: string;
  const fleet = new FleetView();
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness(
      { after: (fn) => cleanups.push(fn) },
      { agents: fleet, lostTaskAfterMs: BOUND_MS },
    );
    const spec = { name: "lost", type: "function", config: stubConfig(), extra: stubExtra() };
    stubId = (await h.tasks.upsertStub(h.ws.id, spec)).stub.id;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const history = async (id: string) =>
    (await h.tasks.history(h.ws.id, id)).map((e) => `${e.status}/${e.attempt}/${e.reason ?? ""}`);

  test("goes to RETRY (agent_lost), runs again elsewhere; a second one's late outcome from the returning agent stands", async () => {
    // agent-1's last heartbeat is past the bound already; while it is still ready nothing happens.
    heartbeat(fleet, "agent-1", Date.now() - BOUND_MS - 1000);
    const [a, b] = (await h.tasks.submit(h.ws.id, stubId, [Buffer.from("a"), Buffer.from("b")])) as [
      string,
      string,
    ];
    await h.event({ type: "started", taskId: a, stubId, attempt: 1, containerId: "ctr-1" });
    await h.event({ type: "started", taskId: b, stubId, attempt: 1, containerId: "ctr-1" });
    await waitUntil(async () => (await h.tasks.getTask(h.ws.id, b)).status === "RUNNING", {
      what: "both running",
    });
    assert.equal((await h.tasks.getTask(h.ws.id, a)).status, "RUNNING");

    fleet.sweep(Date.now()); // heartbeats stopped: lost
    assert.equal(fleet.get("agent-1")?.state, "lost");
    for (const id of [a, b])
      await waitUntil(async () => (await h.tasks.getTask(h.ws.id, id)).status === "RETRY", {
        what: `${id} in RETRY`,
      });
    const ta = await h.tasks.getTask(h.ws.id, a);
    assert.equal(ta.error?.type, "AgentLost");
    assert.match(ta.error?.message ?? "", /agent agent-1 is lost \(last heard \d+ s ago\)/);

    // JetStream redelivers a: a runner on agent-2 takes it as attempt 2 and finishes it.
    await h.event({
      type: "started",
      taskId: a,
      stubId,
      attempt: 2,
      agentId: "agent-2",
      containerId: "ctr-2",
    });
    await h.event({
      type: "finished",
      taskId: a,
      stubId,
      attempt: 2,
      agentId: "agent-2",
      containerId: "ctr-2",
      status: "COMPLETE",
    });
    await waitUntil(async () => (await h.tasks.getTask(h.ws.id, a)).status === "COMPLETE", {
      what: "a complete",
    });
    assert.deepEqual(await history(a), ["RUNNING/1/", "RETRY/1/agent_lost", "RUNNING/2/", "COMPLETE/2/"]);

    // agent-1 comes back and reports b's first attempt: it did run, so its outcome stands.
    heartbeat(fleet, "agent-1", Date.now());
    await h.event({
      type: "finished",
      taskId: b,
      stubId,
      attempt: 1,
      containerId: "ctr-1",
      status: "COMPLETE",
    });
    await waitUntil(async () => (await h.tasks.getTask(h.ws.id, b)).status === "COMPLETE", {
      what: "b complete",
    });
    assert.deepEqual(await history(b), [
      "RUNNING/1/",
      "RETRY/1/agent_lost",
      "RUNNING/1/agent_back",
      "COMPLETE/1/",
    ]);
  });
});
