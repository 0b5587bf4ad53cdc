// A pod whose entrypoint exits at once fails its create with the exit code and
// last output (coordinator/sandboxes/pod-settle.ts), over the shared fake agent.

import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import { BerthError } from "../../shared/errors.ts";
import { waitUntil } from "../helpers/wait.ts";
import { SandboxLabels } from "../../coordinator/sandboxes/request.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import { type SandboxWorld, sandboxWorld } from "./fakes.ts";

/**
 * A pod created under podSettleMs 60000 whose container now stands on the
 * agent: the create is still waiting on it.
 */
async function settlingPod(t: TestContext, name: string, entrypoint: string[]) {
  const w = await sandboxWorld(t, { podSettleMs: 60_000 });
  const a = w.addAgent("agent-a");
  const stub = await w.stub(name, "pod", { entrypoint });
  const creating = w.svc.create(w.ws, stub.id, { expect: "pod" });
  const id = await waitUntil(
    () => {
      const run = a.runs[0];
      return run?.id && a.containers.has(run.id) ? run.id : undefined;
    },
    { what: "the pod's container on the agent" },
  );
  return { w, a, creating, id };
}

/** agent-a's exit event for a sandbox's container. */
function emitExit(
  w: SandboxWorld,
  containerId: string,
  exitCode: number,
  more: Partial<Omit<ContainerEventMessage, "at">> = {},
): void {
  w.emit({
    agentId: "agent-a",
    containerId,
    type: "exit",
    exitCode,
    ...more,
    labels: { [SandboxLabels.sandbox]: "1" },
  });
}

/** The sandbox once its end is recorded. */
function terminated(w: SandboxWorld, id: string) {
  return waitUntil(
    async () => {
      const s = await w.svc.get(w.ws, id);
      return s.status === "terminated" ? s : undefined;
    },
    { what: "the pod's end recorded" },
  );
}

test("a pod whose entrypoint exits at once fails the create with its exit code and last output", async (t) => {
  const { w, a, creating, id } = await settlingPod(t, "crashy", ["python", "serve.py"]);
  a.appendLog(id, "stderr", "ModuleNotFoundError: No module named 'fastapi'");
  a.exit(id, 1);
  await assert.rejects(creating, (e: unknown) => {
    assert.ok(e instanceof BerthError);
    assert.equal(e.code, "failed_precondition");
    assert.match(
      e.message,
      /the pod's entrypoint exited at once \(code 1\); its last output:\nModuleNotFoundError: No module named 'fastapi'/,
    );
    assert.equal(e.details?.exit_code, 1);
    return true;
  });
  const [rec] = await w.store.sandboxes.list(w.ws);
  assert.equal(rec?.status, "terminated");
  assert.match(rec?.terminatedReason ?? "", /start failed: the pod's entrypoint exited at once/);
  assert.deepEqual(w.svc.reservations(), [], "its room is free again");
  assert.equal(a.containers.has(id), false, "its container is removed");
});

test("the exit event coming first leaves the container for the create to read its output, then it goes", async (t) => {
  const { w, a, creating, id } = await settlingPod(t, "crashy", ["python", "-c", "exit(3)"]);
  a.appendLog(id, "stdout", "cannot bind 0.0.0.0:8000");
  a.exit(id, 3);
  // The agent's exit event, handled before the create's next look at the container.
  emitExit(w, id, 3);
  await assert.rejects(creating, /exited at once \(code 3\); its last output:\ncannot bind 0\.0\.0\.0:8000/);
  await w.svc.close();
  assert.equal(a.containers.has(id), false, "removed by the create once read");
});

test("a pod that stays up through podSettleMs is created and running", async (t) => {
  const w = await sandboxWorld(t, { podSettleMs: 50 });
  const a = w.addAgent("agent-a");
  const stub = await w.stub("steady", "pod", { entrypoint: ["python", "-m", "http.server"] });
  const pod = await w.svc.create(w.ws, stub.id, { expect: "pod" });
  assert.equal(pod.status, "running");
  assert.equal(a.containers.get(pod.sandboxId)?.state, "running");
});

test("podSettleMs outside 0..60000 is refused when the service is made", async (t) => {
  await assert.rejects(sandboxWorld(t, { podSettleMs: -1 }), /podSettleMs must be within 0..60000/);
});

test("a pod whose entrypoint exits 0 ran: the create answers it terminated with exit code 0, its room free", async (t) => {
  const { w, a, creating, id } = await settlingPod(t, "batch", ["python", "-c", "print('done')"]);
  a.appendLog(id, "stdout", "done");
  a.exit(id, 0);
  const pod = await creating;
  assert.equal(pod.sandboxId, id);
  assert.equal(pod.status, "terminated");
  assert.equal(pod.exitCode, 0);
  assert.equal(pod.terminatedReason, "its container exited (code 0)");
  assert.deepEqual(w.svc.reservations(), [], "its room is free again");
  assert.equal(a.containers.has(id), false, "its container is removed");
  const read = await w.svc.get(w.ws, id);
  assert.deepEqual([read.status, read.exitCode], ["terminated", 0]);
});

test("a pod whose exit 0 event comes first still finished, with its exit code recorded", async (t) => {
  const { w, a, creating, id } = await settlingPod(t, "batch", ["true"]);
  a.exit(id, 0);
  emitExit(w, id, 0);
  const pod = await creating;
  assert.deepEqual([pod.status, pod.exitCode], ["terminated", 0]);
  await w.svc.close();
  assert.equal(a.containers.has(id), false, "removed by the create");
});

test("a pod that exits non-zero keeps its exit code on the record", async (t) => {
  const { w, a, creating, id } = await settlingPod(t, "crashy", ["false"]);
  a.exit(id, 1);
  await assert.rejects(creating, /exited at once \(code 1\) without output/);
  const read = await w.svc.get(w.ws, id);
  assert.deepEqual([read.status, read.exitCode], ["terminated", 1]);
});

test("a running pod that later exits on its own records its exit code", async (t) => {
  const w = await sandboxWorld(t);
  const a = w.addAgent("agent-a");
  const stub = await w.stub("job", "pod", { entrypoint: ["python", "job.py"] });
  const pod = await w.svc.create(w.ws, stub.id, { expect: "pod" });
  assert.deepEqual([pod.status, pod.exitCode], ["running", null]);
  a.exit(pod.sandboxId, 0);
  emitExit(w, pod.sandboxId, 0);
  const read = await terminated(w, pod.sandboxId);
  assert.equal(read.exitCode, 0);
});

test("a pod killed for memory ends terminated saying so: its limit and the parameter that raises it", async (t) => {
  const w = await sandboxWorld(t, { podSettleMs: 50 });
  const a = w.addAgent("agent-a");
  const stub = await w.stub("model-server", "pod", { entrypoint: ["python", "-m", "http.server"] });
  const pod = await w.svc.create(w.ws, stub.id, { expect: "pod" });
  const id = pod.sandboxId;
  const ended = a.exit(id, 137, "oom_killed");
  emitExit(w, id, 137, { reason: "oom_killed", memoryBytes: ended.memoryBytes });
  const read = await terminated(w, id);
  const mib = ended.memoryBytes / 2 ** 20;
  assert.match(
    read.terminatedReason ?? "",
    new RegExp(
      `^its container \\(code 137\\) was killed for memory: the limit is ${mib} MiB; raise memory= `,
    ),
  );
});
