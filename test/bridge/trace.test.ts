// The agent's task trace (agent/tasks/trace.ts): a traced agent's last lines
// are in the file once its task worker closes; an off trace writes nothing.
// The last test runs a task through a traced TaskRunners on real JetStream.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import { TaskTrace } from "../../agent/tasks/trace.ts";
import { tempDir } from "../helpers/env.ts";
import { nextTask, post, publishTask, queueEmpty, runnerOpener, startTaskNats } from "./helpers.ts";

test("TaskTrace: events are appended as `<unix ms> <event> <json>` lines by close", (t) => {
  const file = join(tempDir(t, "berth-trace-"), "trace.log");
  const trace = new TaskTrace(file);
  assert.equal(trace.on, true);
  assert.equal(trace.nextId(), 1);
  assert.equal(trace.nextId(), 2, "each pull or hand-out gets its own number");
  const before = Date.now();
  trace.event("pull-start", { pull: 1, kind: "wait", batch: 1 });
  trace.event("ack", { task: "ta-1" });
  // Buffered: appended a few times a second, not per event.
  assert.equal(existsSync(file), false, "nothing written before the flush");
  trace.close();
  const lines = readFileSync(file, "utf8").split("\n");
  assert.equal(lines.pop(), "", "every line ends with a newline");
  assert.equal(lines.length, 2);
  const parsed = lines.map((l) => /^(\d+\.\d{3}) (\S+) (\{.*\})$/.exec(l));
  assert.deepEqual(
    parsed.map((m) => [m?.[2], JSON.parse(m?.[3] ?? "null")]),
    [
      ["pull-start", { pull: 1, kind: "wait", batch: 1 }],
      ["ack", { task: "ta-1" }],
    ],
  );
  for (const m of parsed) {
    const at = Number(m?.[1]);
    assert.ok(at >= before - 1 && at <= Date.now() + 1, `a wall-clock timestamp in ms: ${m?.[1]}`);
  }
  // Still usable after close: a later event is appended to what is there.
  trace.event("hold", { tasks: ["ta-2"] });
  trace.close();
  const again = readFileSync(file, "utf8").split("\n");
  assert.equal(again.length, 4);
  assert.match(again[2] ?? "", / hold \{"tasks":\["ta-2"\]\}$/);
});

test("TaskTrace: an off trace (no file) buffers and writes nothing", () => {
  const cwd = readdirSync(process.cwd()).sort();
  for (const trace of [new TaskTrace(), new TaskTrace(undefined), new TaskTrace("")]) {
    assert.equal(trace.on, false);
    trace.event("ack", { task: "ta-1" });
    assert.deepEqual((trace as unknown as { lines: string[] }).lines, [], "nothing buffered");
    trace.close();
  }
  assert.deepEqual(readdirSync(process.cwd()).sort(), cwd, "no file appeared where the agent runs");
});

test("TaskTrace: the task worker traces a task's life and its stop writes the last lines", {
  timeout: 60_000,
}, async (t) => {
  const n = await startTaskNats(t);
  const dir = tempDir(t, "berth-trace-");
  const file = join(dir, "trace.log");
  const runners = new TaskRunners({
    kill: async () => {},
    worker: { pullWaitMs: 1500, workingIntervalMs: 200 },
    trace: new TaskTrace(file),
  });
  let stopped = false;
  t.after(() => (stopped ? undefined : runners.stop()));
  await runners.attach(n.agent, "agent-trace-test");
  const r = await runnerOpener(runners, dir, "ctr-trace-")("stub-trace");
  await publishTask(n, { stubId: "stub-trace", taskId: "task-traced" });
  assert.equal((await nextTask(r.socket)).id, "task-traced");
  const result = { status: "COMPLETE", result: Buffer.from("ok").toString("base64") };
  assert.equal((await post(r.socket, "/v1/tasks/task-traced/result", result)).status, 204);
  // Stopped at once: the last lines are likely still buffered (appended every 200 ms) unless stop() writes them.
  await runners.stop();
  stopped = true;
  const events = readFileSync(file, "utf8")
    .trimEnd()
    .split("\n")
    .map((l) => {
      const [, name, json] = /^\d+\.\d{3} (\S+) (\{.*\})$/.exec(l) ?? [];
      return { name, fields: JSON.parse(json ?? "null") as Record<string, unknown> };
    });
  const ofTask = events.filter((e) => e.fields.task === "task-traced").map((e) => e.name);
  assert.deepEqual(ofTask, ["pull-msg", "hand", "result", "ack"]);
  const pull = events.find((e) => e.name === "pull-msg")?.fields.pull;
  assert.ok(typeof pull === "number" && pull >= 1, "the pull that brought it is named");
  assert.deepEqual(
    events.filter((e) => e.fields.pull === pull).map((e) => e.name),
    ["pull-start", "pull-msg", "pull-end"],
  );
  assert.ok(events.some((e) => e.name === "next-end" && e.fields.got === 1));
  await queueEmpty(n);
});
