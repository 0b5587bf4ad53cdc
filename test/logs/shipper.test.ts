// The agent's log shipper against a real nats-server with the BERTH_LOGS
// stream: batches on subjects naming workspace, stub, container and task,
// attribution from the runner's task output (either copy first, two tasks at
// once in one container), the per-container budget with its "[N lines
// dropped]" marker, and the agent's NATS permissions.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { connect, type NatsConnection } from "nats";
import { TaskAttribution } from "../../agent/logs/attribution.ts";
import { LogShipper } from "../../agent/logs/index.ts";
import { ensureStreams } from "../../coordinator/fleet/streams.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { type ContainerLogBatch, streams, subjects } from "../../shared/subjects.ts";
import { RunnerLabels, taskOutputSubject } from "../../shared/tasks.ts";
import { waitUntil } from "../helpers/wait.ts";
import { startTestNats, type TestNats } from "../helpers/nats.ts";

const runnerLabels = (ws: string, stub: string) => ({
  [RunnerLabels.workspaceId]: ws,
  [RunnerLabels.stubId]: stub,
});

describe("log shipper", () => {
  let nats: TestNats;
  let coord: NatsConnection;
  let agentNc: NatsConnection;
  const cleanups: (() => unknown)[] = [];
  before(async () => {
    nats = await startTestNats({ after: (fn) => cleanups.push(fn) });
    coord = await connect({
      servers: nats.url,
      user: nats.coordinator.user,
      pass: nats.coordinator.password,
    });
    cleanups.push(() => closeNats(coord));
    await ensureStreams(await coord.jetstreamManager());
    // The agent's own NATS user: publishing logs must stay within its permissions.
    agentNc = await connect({ servers: nats.url, user: nats.agent.user, pass: nats.agent.password });
    cleanups.push(() => closeNats(agentNc));
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  /** Every stored batch on `filter`, in order. */
  async function stored(filter: string): Promise<{ subject: string; batch: ContainerLogBatch }[]> {
    const js = coord.jetstream();
    const c = await js.consumers.get(streams.logs.name, { filterSubjects: filter });
    const info = await c.info();
    const out: { subject: string; batch: ContainerLogBatch }[] = [];
    if (info.num_pending === 0) return out;
    const msgs = await c.fetch({ max_messages: info.num_pending, expires: 2000 });
    for await (const m of msgs) {
      out.push({ subject: m.subject, batch: m.json<ContainerLogBatch>() });
      if (m.info.pending === 0) break;
    }
    return out;
  }
  const linesOf = (s: { batch: ContainerLogBatch }[]) =>
    s.flatMap((x) => x.batch.lines.map((l) => ({ task: x.batch.taskId, line: l.line, stream: l.stream })));

  test("lines are batched per container on workspace/stub/container/task subjects, each with its task", async (t) => {
    const shipper = new LogShipper({ agentId: "agent-a", attributionHoldMs: 200 });
    t.after(() => shipper.close());
    shipper.attach(agentNc);
    const labels = runnerLabels("ws-one", "stub-one");
    const say = (containerId: string, line: string, stream: "stdout" | "stderr" = "stdout") =>
      shipper.line({ containerId, stream, line, ts: Date.now(), labels });
    // The runner's copy of task-1's output comes first, through NATS as the bridge sends it.
    agentNc.publish(
      taskOutputSubject("agent-a", "task-1"),
      JSON.stringify({
        taskId: "task-1",
        stream: "stdout",
        data: "hello from task 1\nsecond ",
        at: Date.now(),
      }),
    );
    agentNc.publish(
      taskOutputSubject("agent-a", "task-1"),
      JSON.stringify({ taskId: "task-1", stream: "stdout", data: "line\n", at: Date.now() }),
    );
    await agentNc.flush();
    say("ctr-one", "runner starting");
    say("ctr-one", "hello from task 1");
    say("ctr-one", "second line");
    // task-2's spool line first, its claim after: it still gets its task.
    say("ctr-one", "task 2 says hi", "stderr");
    shipper.taskOutput("ctr-one", "task-2", "stderr", "task 2 says hi\n");
    say("ctr-one", "after");

    const filter = subjects.workspaceLogs("ws-one");
    await waitUntil(async () => linesOf(await stored(filter)).length === 5, { what: "five lines stored" });
    const got = await stored(filter);
    assert.deepEqual(linesOf(got), [
      { task: null, line: "runner starting", stream: "stdout" },
      { task: "task-1", line: "hello from task 1", stream: "stdout" },
      { task: "task-1", line: "second line", stream: "stdout" },
      { task: "task-2", line: "task 2 says hi", stream: "stderr" },
      { task: null, line: "after", stream: "stdout" },
    ]);
    const first = got[0] as { subject: string; batch: ContainerLogBatch };
    assert.equal(first.subject, "berth.agent.agent-a.logs.ws-one.stub-one.ctr-one._");
    assert.deepEqual(
      { ...first.batch, lines: [] },
      {
        agentId: "agent-a",
        workspaceId: "ws-one",
        stubId: "stub-one",
        containerId: "ctr-one",
        taskId: null,
        lines: [],
      },
    );
    // A task filter is a subject filter.
    const t1 = await stored(subjects.workspaceLogs("ws-one", { taskId: "task-1" }));
    assert.equal(t1.length, 1, "task-1's two lines went out as one message");
    assert.deepEqual(
      linesOf(t1).map((l) => l.line),
      ["hello from task 1", "second line"],
    );
  });

  test("a chatty container is cut at its budget and the gap is marked with a count", async (t) => {
    const shipper = new LogShipper({ agentId: "agent-b", maxLinesPerSecond: 5, batchMs: 50 });
    t.after(() => shipper.close());
    shipper.attach(agentNc);
    const labels = { purpose: "test" }; // not a runner: no task attribution, no hold
    for (let i = 0; i < 25; i++)
      shipper.line({ containerId: "ctr-chatty", stream: "stdout", line: `n${i}`, ts: Date.now(), labels });
    const filter = subjects.workspaceLogs("_", { containerId: "ctr-chatty" });
    await waitUntil(async () => linesOf(await stored(filter)).length >= 6, {
      what: "the budget's lines and the marker",
    });
    const lines = linesOf(await stored(filter)).map((l) => l.line);
    assert.equal(shipper.droppedTotal >= 19, true, `dropped ${shipper.droppedTotal}`);
    assert.deepEqual(lines.slice(0, 5), ["n0", "n1", "n2", "n3", "n4"]);
    assert.match(lines[5] as string, /^\[\d+ lines dropped\]$/);
    const marked = Number(/\d+/.exec(lines[5] as string)?.[0]);
    // Every line is either stored or counted in a marker.
    const kept = lines.filter((l) => l.startsWith("n")).length;
    const counted = lines
      .filter((l) => l.startsWith("["))
      .reduce((n, l) => n + Number(/\d+/.exec(l)?.[0]), 0);
    assert.equal(kept + counted, 25);
    assert.ok(marked >= 1);
  });

  test("an unclaimed runner line goes out without a task once the hold is over", async (t) => {
    const shipper = new LogShipper({ agentId: "agent-c", attributionHoldMs: 100 });
    t.after(() => shipper.close());
    shipper.attach(agentNc);
    shipper.line({
      containerId: "ctr-c",
      stream: "stdout",
      line: "from a subprocess",
      ts: Date.now(),
      labels: runnerLabels("ws-c", "stub-c"),
    });
    const filter = subjects.workspaceLogs("ws-c");
    await waitUntil(async () => (await stored(filter)).length === 1, { what: "the line stored" });
    assert.deepEqual(linesOf(await stored(filter)), [
      { task: null, line: "from a subprocess", stream: "stdout" },
    ]);
  });
});

describe("task attribution", () => {
  test("two tasks at once in one container: each line goes to the task that wrote it", () => {
    const a = new TaskAttribution();
    a.output("ctr-1", "task-a", "stdout", "same\nonly a\n");
    a.output("ctr-1", "task-b", "stdout", "only b\nsame\n");
    assert.equal(a.match("ctr-1", "stdout", "only b"), "task-b");
    assert.equal(a.match("ctr-1", "stdout", "same"), "task-a");
    assert.equal(a.match("ctr-1", "stdout", "same"), "task-b");
    assert.equal(a.match("ctr-1", "stdout", "same"), undefined, "each claim matches once");
    assert.equal(a.match("ctr-2", "stdout", "only a"), undefined, "another container's line is not claimed");
    assert.equal(a.match("ctr-1", "stderr", "only a"), undefined, "nor the other stream's");
    assert.equal(a.match("ctr-1", "stdout", "only a"), "task-a");
  });

  test("long lines are cut as the spool cuts them; old claims expire", () => {
    let now = 0;
    const a = new TaskAttribution({ spoolLineBytes: 8, claimTtlMs: 1000, now: () => now });
    a.output(undefined, "task-l", "stdout", "0123456789abcdefXY\r\n");
    assert.equal(a.match("ctr-x", "stdout", "01234567"), "task-l");
    assert.equal(a.match("ctr-x", "stdout", "89abcdef"), "task-l");
    assert.equal(a.match("ctr-x", "stdout", "XY"), "task-l");
    a.output(undefined, "task-l", "stdout", "late\n");
    now = 5000;
    a.expire();
    assert.equal(a.size, 0);
    assert.equal(a.match("ctr-x", "stdout", "late"), undefined);
  });
});
