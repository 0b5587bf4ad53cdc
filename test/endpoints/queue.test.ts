import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { waitFor } from "../../shared/net.ts";
import type { TaskStatus } from "../../shared/tasks.ts";
import { perSuite } from "../helpers/suite.ts";
import { startEndpointHarness } from "./harness.ts";
import { bearer } from "../helpers/auth.ts";

describe("endpoint queue: slots, max_pending_tasks, expiry, unreachable containers", () => {
  const e = perSuite((suite) => startEndpointHarness(suite));

  const post = (path: string, body: unknown) =>
    fetch(`${e.base}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer(e.token) },
      body: JSON.stringify(body),
    });
  const statusOf = async (id: string) => (await e.h.tasks.getTask(e.ws.id, id)).status;
  const until = (id: string, s: TaskStatus) =>
    waitFor(async () => (await statusOf(id)) === s, { timeoutMs: 5000, what: `task ${id} to be ${s}` });

  test("requests wait for a container, count as demand, and are served when one appears; over max_pending_tasks → 429", async () => {
    const d = await e.deploy("cold", "endpoint", { config: { max_pending_tasks: 2 } });
    const waiting = [post("/endpoint/cold", { n: 1 }), post("/endpoint/cold", { n: 2 })];
    await waitFor(() => e.endpoints.slots.waitingFor(d.stub.id) === 2, { what: "two waiting requests" });
    assert.equal(e.h.tasks.demandOf(d.stub.id)?.pending, 2, "waiting requests are PENDING demand");
    const refused = await post("/endpoint/cold", { n: 3 });
    assert.equal(refused.status, 429);
    assert.match(
      ((await refused.json()) as { error: { message: string } }).error.message,
      /max_pending_tasks/,
    );
    assert.equal(refused.headers.get("x-task-id"), null, "a refused request leaves no task");
    assert.equal(e.h.tasks.demandOf(d.stub.id)?.pending, 2);

    const runner = await e.addContainer(d.stub.id, "ctr-cold");
    const answers = await Promise.all(waiting);
    assert.deepEqual(
      answers.map((r) => r.status),
      [200, 200],
    );
    const bodies = (await Promise.all(answers.map((r) => r.json()))) as { got: { n: number } }[];
    assert.deepEqual(bodies.map((b) => b.got.n).sort(), [1, 2]);
    assert.equal(runner.seen.length, 2);
    await waitFor(() => e.h.tasks.demandOf(d.stub.id) === undefined, { what: "demand to drop to nothing" });
  });

  test("capacity: never more in flight per container than workers × concurrent_requests", async () => {
    const d = await e.deploy("busy", "endpoint", {
      config: { workers: 1, max_pending_tasks: 100 },
      extra: { concurrent_requests: 2 },
    });
    const a = await e.addContainer(d.stub.id, "ctr-busy-a");
    // Long enough that the first container cannot drain all eight before the second appears, even on a loaded CI machine.
    const reqs = Array.from({ length: 8 }, (_, i) => post("/endpoint/busy", { op: "slow", ms: 600, i }));
    await waitFor(() => a.inFlight === 2, { what: "the first container to fill" });
    assert.equal(
      e.h.tasks.containerActivity("ctr-busy-a")?.busy,
      true,
      "a container serving requests is busy",
    );
    const b = await e.addContainer(d.stub.id, "ctr-busy-b");
    const res = await Promise.all(reqs);
    assert.ok(res.every((r) => r.status === 200));
    assert.equal(a.maxInFlight, 2);
    assert.ok(b.maxInFlight <= 2);
    assert.equal(a.seen.length + b.seen.length, 8);
    assert.ok(b.seen.length > 0, "the container that appeared took waiting requests");
    await waitFor(() => e.h.tasks.containerActivity("ctr-busy-a")?.busy === false, { what: "idle again" });
  });

  test("a request not started before task_policy.expires ends EXPIRED with 503", async () => {
    await e.deploy("never", "endpoint", {
      config: { task_policy: { max_retries: 0, timeout: 180, expires: "0.3" } },
    });
    const res = await post("/endpoint/never", {});
    assert.equal(res.status, 503);
    const body = (await res.json()) as { error: { code: string }; task_id: string };
    assert.equal(body.error.code, "task_expired");
    assert.equal(res.headers.get("x-task-id"), body.task_id);
    await until(body.task_id, "EXPIRED");
  });

  test("a container the tunnel cannot reach: forgotten, the request goes back to the head and another container serves it", async () => {
    const d = await e.deploy("flaky", "endpoint");
    // A container the manager lists but whose server is gone: the tunnel refuses.
    e.containers.set(d.stub.id, [{ id: "ctr-dead", agentId: "agent-1", state: "running" }]);
    const pending = post("/endpoint/flaky", { x: 1 });
    await waitFor(() => e.tunnels.forgotten.includes("ctr-dead"), {
      what: "the dead container to be forgotten",
    });
    const runner = await e.addContainer(d.stub.id, "ctr-alive");
    const res = await pending;
    assert.equal(res.status, 200);
    assert.equal(runner.seen.length, 1);
    const id = res.headers.get("x-task-id") as string;
    await until(id, "COMPLETE");
    const hist = (await e.h.tasks.history(e.ws.id, id)).map(
      (h) => `${h.status}/${h.attempt}/${h.containerId}`,
    );
    assert.match(hist.at(-1) ?? "", /^COMPLETE\/\d+\/ctr-alive$/);
    assert.ok(
      hist.some((h) => h.startsWith("RETRY/")),
      `a RETRY is recorded: ${hist.join(", ")}`,
    );
  });

  test("only running containers take requests; a starting one does not", async () => {
    const d = await e.deploy("warming", "endpoint", {
      config: { task_policy: { max_retries: 0, timeout: 180, expires: "0.3" } },
    });
    e.containers.set(d.stub.id, [{ id: "ctr-warming", agentId: "agent-1", state: "starting" }]);
    const res = await post("/endpoint/warming", {});
    assert.equal(res.status, 503);
  });

  test("a task cancelled through the task API ends its open request (409) and frees the slot", async () => {
    const d = await e.deploy("cancelme", "endpoint");
    const runner = await e.addContainer(d.stub.id, "ctr-cancelme");
    const pending = post("/endpoint/cancelme", { op: "hang" });
    await waitFor(() => runner.seen.length === 1, { what: "the request at the container" });
    const id = runner.seen[0]?.headers["x-task-id"] as string;
    await until(id, "RUNNING");
    await e.h.tasks.cancel(e.ws.id, id);
    const res = await pending;
    assert.equal(res.status, 409);
    assert.equal(await statusOf(id), "CANCELLED");
    await waitFor(() => runner.aborted === 1, { what: "the container's request to be aborted" });
    assert.equal(e.endpoints.slots.inFlightOn("ctr-cancelme"), 0);
  });

  test("a request no host can ever place answers 422 unplaceable with the planner's reason, not 409", async () => {
    const d = await e.deploy("nowhere", "endpoint");
    const pending = post("/endpoint/nowhere", { op: "echo" });
    // What the container starter does when the planner's refusal is permanent (starter.ts).
    const reason =
      "no agent can fit cpu=1 memory=128 MiB gpu=1xH200; no agent has 1 GPU(s) of type H200 (fleet GPUs: 8xA10G)";
    await waitFor(
      async () => (await e.h.tasks.failPending(d.stub.id, { code: "unplaceable", message: reason })) === 1,
      {
        what: "the request's task to wait for a container",
      },
    );
    const res = await pending;
    const body = (await res.json()) as { error: { code: string; message: string }; task_id?: string };
    assert.equal(res.status, 422, JSON.stringify(body));
    assert.equal(body.error.code, "unplaceable");
    assert.equal(body.error.message, reason);
  });
});
