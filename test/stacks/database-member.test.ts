import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { DatabaseMembers } from "../../coordinator/stacks/database-member.ts";
import type { MemberKind } from "../../coordinator/stacks/members.ts";
import { StackService } from "../../coordinator/stacks/service.ts";
import { BerthError } from "../../shared/errors.ts";
import { databaseWorld } from "../databases/fakes.ts";

// The `database` member kind (coordinator/stacks/database-member.ts) through
// the stack service, over the real database service, sandbox service (pods),
// secret service and SQLite store of the databases' test world; the agent is
// the shared fake ContainerApi whose readiness-check execs pass. A second
// kind stands for a member the test makes fail (the deployment kind is tested
// in routes.test.ts and test/e2e/stacks.test.ts).

/** A member kind whose new versions fail their readiness with `why` (or pass when null). */
function scripted(why: string | null): MemberKind & { rolledBack: string[] } {
  const rolledBack: string[] = [];
  return {
    kind: "deployment",
    order: 1,
    rolledBack,
    check: () => {},
    apply: async (_ws, spec) => ({ ref: `ref-${spec.name}`, version: 1 }),
    readiness: async () => (why === null ? { ready: true } : { ready: false, failed: why }),
    settle: async () => {},
    rollback: async (_ws, o) => void rolledBack.push(o.name),
    retire: async () => {},
  };
}

const notFound = (e: unknown) => e instanceof BerthError && e.code === "not_found";

test("a database member is created and ready; unchanged it is kept; left out it is stopped with its data", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  const stacks = new StackService({
    repo: d.w.store.stacks,
    kinds: [new DatabaseMembers(d.db), scripted(null)],
    log: pino({ level: "silent" }),
    pollMs: 1,
  });
  const pg = { kind: "database", name: "main", engine: "postgres" };
  const app = { kind: "deployment", name: "api" };
  const v1 = await stacks.create(d.w.ws, "shop", { members: [app, pg] });
  assert.equal(v1.latest?.status, "ready", JSON.stringify(v1.latest));
  const db = await d.db.get(d.w.ws, "main");
  assert.equal(db.status, "running");
  const member = v1.latest?.members.find((m) => m.name === "main");
  assert.deepEqual([member?.action, member?.state, member?.ref], ["deploy", "ready", db.id]);

  const v2 = await stacks.update(d.w.ws, v1.stack.id, { members: [{ ...app, v: 2 }, pg] });
  assert.equal(v2.latest?.status, "ready");
  assert.equal(v2.latest?.members.find((m) => m.name === "main")?.action, "keep");

  // Its engine, cpu or memory cannot change in place: the attempt fails naming the field.
  const v3 = await stacks.update(d.w.ws, v1.stack.id, { members: [app, { ...pg, cpu: 2 }] });
  assert.equal(v3.latest?.status, "rolled_back");
  assert.equal(v3.latest?.failure?.member, "main");
  assert.match(
    v3.latest?.failure?.reason ?? "",
    /cannot deploy it: the database main cannot change its cpu in place/,
  );
  assert.equal((await d.db.get(d.w.ws, "main")).status, "running", "the live database is untouched");

  const v4 = await stacks.update(d.w.ws, v1.stack.id, { members: [app] });
  assert.equal(v4.latest?.status, "ready");
  assert.equal(v4.latest?.members.find((m) => m.name === "main")?.state, "removed");
  const stopped = await d.db.get(d.w.ws, "main");
  assert.equal(stopped.status, "stopped");
  assert.deepEqual(d.removedVolumes, [], "its data is kept");
});

test("rollback deletes a database the attempt created, and leaves one that existed alone", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  const failing = scripted("its handler does not load: boom");
  const stacks = new StackService({
    repo: d.w.store.stacks,
    kinds: [new DatabaseMembers(d.db), failing],
    log: pino({ level: "silent" }),
    pollMs: 1,
  });
  await d.db.create(d.w.ws, { engine: "redis", name: "cache" });
  const s = await stacks.create(d.w.ws, "shop", {
    members: [
      { kind: "deployment", name: "api" },
      { kind: "database", name: "fresh", engine: "postgres" },
      { kind: "database", name: "cache", engine: "redis" },
    ],
  });
  assert.equal(s.latest?.status, "rolled_back");
  assert.deepEqual(s.latest?.failure, { member: "api", reason: "its handler does not load: boom" });
  assert.deepEqual(failing.rolledBack, ["api"]);
  const byName = Object.fromEntries((s.latest?.members ?? []).map((m) => [m.name, m]));
  assert.equal(byName.fresh?.state, "rolled_back");
  assert.equal(byName.fresh?.previous, null);
  assert.equal(byName.cache?.state, "rolled_back");
  assert.notEqual(byName.cache?.previous, null, "the existing database is recorded as what was there");
  await assert.rejects(d.db.get(d.w.ws, "fresh"), notFound);
  assert.deepEqual(d.removedVolumes, [`${d.w.ws}/db-fresh`], "the created database's data went with it");
  assert.equal((await d.db.get(d.w.ws, "cache")).status, "running", "the one that existed stays");
});

test("bad database members are refused before anything runs, naming the field", async (t) => {
  const d = await databaseWorld(t);
  const stacks = new StackService({
    repo: d.w.store.stacks,
    kinds: [new DatabaseMembers(d.db), scripted(null)],
    log: pino({ level: "silent" }),
  });
  const bad: [object, RegExp][] = [
    [
      { kind: "database", name: "Main", engine: "postgres" },
      /members\[0\] \(database Main\): database name "Main" is not valid/,
    ],
    [{ kind: "database", name: "main", engine: "mysql" }, /database engine "mysql" is not one berth runs/],
    [
      { kind: "database", name: "main", engine: "redis", disk: 5 },
      /disk is not a field of a database member/,
    ],
    [{ kind: "database", name: "main", engine: "redis", cpu: "2" }, /cpu must be a number/],
  ];
  for (const [member, message] of bad)
    await assert.rejects(stacks.create(d.w.ws, "bad", { members: [member] }), (e: unknown) => {
      assert.ok(e instanceof BerthError && e.code === "invalid_request", String(e));
      assert.match((e as Error).message, message);
      return true;
    });
  assert.deepEqual(await d.w.store.stacks.list(d.w.ws), []);
  assert.deepEqual(await d.db.list(d.w.ws), []);
});
