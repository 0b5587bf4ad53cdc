// The agent's sandbox process table across an agent restart
// (agent/sandboxes/process-records.ts): a process that ran then answers
// `error` with the reason instead of process_not_found, ended ones keep their
// status, pids go on, and a container that is gone takes its record with it.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { AGENT_RESTARTED } from "../../agent/sandboxes/process-records.ts";
import { ProcessTable, RECORD_DELAY_MS } from "../../agent/sandboxes/processes.ts";
import { waitFor } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";
import { FakeExec } from "../helpers/fake-exec.ts";

test("an agent restart: running processes become error (the agent restarted), ended ones stay, pids go on", async (t) => {
  const dir = join(tempDir(t), "processes");
  const execs: FakeExec[] = [];
  const exec = async (_id: string, req: { args: string[] }) => {
    const e = new FakeExec(req);
    execs.push(e);
    return e;
  };
  let now = 1_000;
  const before = new ProcessTable({ exec, recordDir: dir, clock: () => now });
  await before.startProcess("sbx-a", { args: ["true"] });
  await before.startProcess("sbx-a", { args: ["sleep", "1000"], cwd: "/work" });
  await before.startProcess("sbx-gone", { args: ["sleep", "1000"] });
  execs[0]?.finish(3);
  assert.equal((await before.waitProcess("sbx-a", 1)).exitCode, 3);
  // The agent hands over (ContainerHost.close): what is due is written.
  before.close();

  // A new agent process over the same data dir; sbx-a still runs, sbx-gone does not.
  now = 5_000;
  const after = new ProcessTable({ exec, recordDir: dir, clock: () => now });
  after.recover(["sbx-a"]);
  const listed = await after.listProcesses("sbx-a");
  assert.deepEqual(
    listed.map((p) => [p.pid, p.status, p.exitCode, p.error]),
    [
      [1, "exited", 3, undefined],
      [2, "error", 255, AGENT_RESTARTED],
    ],
  );
  assert.equal(listed[1]?.endedAt, 5_000);
  assert.equal(listed[1]?.cwd, "/work");
  // Its output went with the old agent: nothing to read, the follow ends at once.
  assert.equal((await after.readProcessOutput("sbx-a", 2, "combined", 0)).data.length, 0);
  for await (const _ of after.followProcessOutput("sbx-a", 2, "stdout", 0)) assert.fail("no output");
  assert.equal((await after.waitProcess("sbx-a", 2)).status, "error");
  await assert.rejects(after.writeProcessStdin("sbx-a", 2, Buffer.from("x")), /has ended/);
  assert.equal((await after.startProcess("sbx-a", { args: ["true"] })).pid, 3);
  await assert.rejects(
    after.getProcess("sbx-gone", 1),
    (e: { code?: string }) => e.code === "process_not_found",
  );
  assert.deepEqual(readdirSync(dir).sort(), ["sbx-a.processes.json"]);

  after.drop("sbx-a");
  assert.equal(existsSync(join(dir, "sbx-a.processes.json")), false);
});

test("records are written a moment after a start or an end, not before its answer; close writes what is due", async (t) => {
  const dir = join(tempDir(t), "processes");
  const execs: FakeExec[] = [];
  const exec = async (_id: string, req: { args: string[] }) => {
    const e = new FakeExec(req);
    execs.push(e);
    return e;
  };
  const file = join(dir, "sbx-a.processes.json");
  const recorded = () =>
    (
      JSON.parse(readFileSync(file, "utf8")) as { processes: { pid: number; status: string }[] }
    ).processes.map((p) => [p.pid, p.status]);
  const table = new ProcessTable({ exec, recordDir: dir });
  await table.startProcess("sbx-a", { args: ["true"] });
  // Answered before anything was written: the write is off the answer's path.
  assert.equal(existsSync(file), false);
  await waitFor(() => existsSync(file), { timeoutMs: 10_000, intervalMs: 5, what: "the records file" });
  assert.deepEqual(recorded(), [[1, "running"]]);

  execs[0]?.finish(0);
  await table.waitProcess("sbx-a", 1);
  await table.startProcess("sbx-a", { args: ["sleep", "1000"] });
  // Both changes are due; the hand-over writes them at once.
  assert.deepEqual(recorded(), [[1, "running"]]);
  table.close();
  assert.deepEqual(recorded(), [
    [1, "exited"],
    [2, "running"],
  ]);
  // Closed: nothing more is written (the next agent process owns the records).
  execs[1]?.finish(0);
  await table.waitProcess("sbx-a", 2);
  await new Promise((r) => setTimeout(r, RECORD_DELAY_MS * 4));
  assert.deepEqual(recorded(), [
    [1, "exited"],
    [2, "running"],
  ]);
});
