// `berth usage` against the coordinator's real HTTP app on a loopback port: a
// task a member ran shows in the table, as JSON and as CSV, by member.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { runCli } from "../helpers/cluster.ts";
import { waitUntil } from "../helpers/wait.ts";
import { type HttpHarness, cliEnv, startHttpHarness } from "../http/harness.ts";
import { teardownStack } from "../helpers/suite.ts";
import { stubConfig, stubExtra } from "../tasks/harness.ts";

describe("berth usage", () => {
  let x: HttpHarness;
  let env: NodeJS.ProcessEnv;
  let aliceId = "";
  const { later: hooks } = teardownStack({ after });
  before(async () => {
    x = await startHttpHarness(hooks);
    const alice = await x.h.store.tokens.create(x.a.id, { name: "alice", role: "developer" });
    const viewer = await x.h.store.tokens.create(x.a.id, { name: "books", role: "viewer" });
    aliceId = alice.record.id;
    env = await cliEnv(x, hooks, viewer.secret);
    const { stub } = await x.h.tasks.upsertStub(x.a.id, {
      name: "train",
      type: "function",
      config: stubConfig({ runtime: { cpu: 1, gpu: "A10G", memory: 1024, image_id: "" } }),
      extra: stubExtra({ gpu_types: ["A10G"], gpu_count: 1 }),
    });
    const [taskId] = await x.h.tasks.submit(x.a.id, stub.id, [new TextEncoder().encode("x")], {
      tokenId: alice.record.id,
    });
    await x.h.event({
      type: "finished",
      taskId: taskId as string,
      stubId: stub.id,
      status: "COMPLETE",
      startedAt: Date.parse("2026-11-30T08:00:00Z"),
      at: Date.parse("2026-11-30T08:10:00Z"),
    });
    await waitUntil(async () => (await x.h.store.tasks.get(taskId as string))?.endedAt, {
      what: "the task's row",
    });
  });

  test("a table, JSON and CSV by member; a bad --by is refused", async () => {
    const args = ["usage", "--from", "2026-11-30", "--to", "2026-11-30", "--by", "member"];
    const table = await runCli(args, env);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^usage from 2026-11-30T00:00:00\.000Z to 2026-12-01T00:00:00\.000Z\n/);
    assert.match(table.stdout, /\nalice\s+1\s+600\s+600\s+600\s+600\s+A10G=600\s+0\n/);
    assert.match(table.stdout, /\ntotal\s+1\s+600\s+/);

    const json = JSON.parse((await runCli([...args, "--json"], env)).stdout);
    assert.deepEqual(json.rows[0].member, { id: aliceId, name: "alice" });
    assert.equal(json.totals.gpu_seconds_by_type.A10G, 600);

    const csv = await runCli([...args, "--csv"], env);
    assert.equal(csv.code, 0, csv.stderr);
    const lines = csv.stdout.split("\r\n");
    assert.equal(lines.at(-1), "");
    const header = (lines[0] ?? "").split(",");
    const alice = (lines[1] ?? "").split(",");
    assert.equal(header.length, alice.length);
    assert.equal(alice[header.indexOf("member_name")], "alice");
    assert.equal(alice[header.indexOf("gpu_seconds_A10G")], "600");
    assert.equal(lines.length, 3);

    const bad = await runCli(["usage", "--by", "week"], env);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /expected day, deployment or member/);
  });
});
