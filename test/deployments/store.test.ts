// The deployments table on SQLite and PostgreSQL: versions reserved under
// concurrency, hidden reservations, serve sessions updated in place, state
// changes, idle serve sessions, and the join with stubs.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

for (const engine of STORE_ENGINES) {
  describe(`deployment records on ${engine.name}`, () => {
    let store: Store;
    let ws: string;
    let otherWs: string;
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };
    const at = (s: number) => new Date(Date.UTC(2030, 0, 1, 0, 0, s)).toISOString();

    const stub = async (name: string, type = "endpoint/deployment") =>
      (
        await store.stubs.upsert(ws, {
          name,
          type,
          config: stubConfig(),
          extra: stubExtra({ min_containers: 2 }),
          objectId: null,
        })
      ).stub;

    before(async () => {
      store = await Store.open(await engine.url(suite));
      ws = (await store.workspaces.create("dep-main")).id;
      otherWs = (await store.workspaces.create("dep-other")).id;
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("concurrent reservations of one name get distinct versions 1..n; other names and workspaces count apart", async () => {
      const reserved = await Promise.all(
        Array.from({ length: 8 }, () => store.deployments.reserveVersion(ws, "race", "endpoint", at(0))),
      );
      assert.deepEqual(
        reserved.map((r) => r.version).sort((a, b) => a - b),
        [1, 2, 3, 4, 5, 6, 7, 8],
      );
      assert.equal((await store.deployments.reserveVersion(ws, "other", "endpoint", at(0))).version, 1);
      assert.equal((await store.deployments.reserveVersion(otherWs, "race", "endpoint", at(0))).version, 1);
      // A reservation without a stub is invisible to readers.
      assert.equal(await store.deployments.get(reserved[0]?.id as string), undefined);
      assert.deepEqual(await store.deployments.list(ws, "race"), []);
    });

    test("attachStub makes a version visible and active; list is newest first; get and findVersion", async () => {
      const s1 = await stub("app/v1");
      const s2 = await stub("app/v2");
      const r1 = await store.deployments.reserveVersion(ws, "app", "endpoint", at(1));
      const d1 = await store.deployments.attachStub(r1.id, s1.id, at(1));
      const r2 = await store.deployments.reserveVersion(ws, "app", "endpoint", at(2));
      const d2 = await store.deployments.attachStub(r2.id, s2.id, at(2));
      assert.equal(d1.active, true);
      assert.equal(d1.stubId, s1.id);
      assert.equal(d1.serve, false);
      assert.match(d1.id, /^dep-/);
      assert.deepEqual(
        (await store.deployments.list(ws, "app")).map((d) => d.version),
        [2, 1],
      );
      assert.deepEqual((await store.deployments.findVersion(ws, "app", 2))?.id, d2.id);
      assert.equal(await store.deployments.findVersion(otherWs, "app", 2), undefined);
      const withStubs = (await store.deployments.listWithStubs()).filter((d) => d.name === "app");
      assert.equal(withStubs.length, 2);
      assert.equal(withStubs[0]?.extra.min_containers, 2);
      assert.equal(withStubs[0]?.config.handler, "app:square");
    });

    test("setActive stops and starts (start moves started_at); activeOnly lists only active ones", async () => {
      const s = await stub("life/v1");
      const r = await store.deployments.reserveVersion(ws, "life", "schedule", at(3));
      const d = await store.deployments.attachStub(r.id, s.id, at(3));
      const stopped = await store.deployments.setActive(d.id, false, at(4));
      assert.equal(stopped?.active, false);
      assert.equal(stopped?.startedAt, at(3));
      assert.equal(stopped?.updatedAt, at(4));
      assert.ok(!(await store.deployments.listWithStubs({ activeOnly: true })).some((x) => x.id === d.id));
      const started = await store.deployments.setActive(d.id, true, at(5));
      assert.equal(started?.active, true);
      assert.equal(started?.startedAt, at(5));
      assert.ok((await store.deployments.listWithStubs({ activeOnly: true })).some((x) => x.id === d.id));
      assert.equal(await store.deployments.remove(d.id), true);
      assert.equal(await store.deployments.get(d.id), undefined);
    });

    test("serve sessions: one record per name, updated in place; idle ones are found by last request or creation", async () => {
      const s1 = await stub("dev", "endpoint/serve");
      const first = await store.deployments.upsertServe(ws, "dev", "endpoint", s1.id, at(10));
      assert.equal(first.created, true);
      assert.equal(first.deployment.version, 0);
      assert.equal(first.deployment.serve, true);
      const s2 = await stub("dev", "taskqueue/serve");
      const again = await store.deployments.upsertServe(ws, "dev", "taskqueue", s2.id, at(20));
      assert.equal(again.created, false);
      assert.equal(again.deployment.id, first.deployment.id);
      assert.equal(again.deployment.kind, "taskqueue");
      assert.equal(again.deployment.stubId, s2.id);
      assert.equal(again.deployment.lastRequestAt, at(20));
      assert.equal(again.deployment.startedAt, at(10), "a running session keeps its start");

      const idle = async (before: string) =>
        (await store.deployments.idleServeSessions(before)).map((d) => d.id).includes(first.deployment.id);
      assert.equal(await idle(at(20)), false);
      assert.equal(await idle(at(21)), true);
      await store.deployments.touch(first.deployment.id, at(30));
      assert.equal(await idle(at(21)), false);
      // Deployed (non-serve) versions are never serve sessions.
      const old = await store.deployments.idleServeSessions(at(59));
      assert.ok(old.every((d) => d.serve));
    });

    test("deleting the workspace removes its deployments (cascade)", async () => {
      const doomed = (await store.workspaces.create("dep-doomed")).id;
      const s = (
        await store.stubs.upsert(doomed, {
          name: "x/v1",
          type: "function/deployment",
          config: stubConfig(),
          extra: stubExtra(),
          objectId: null,
        })
      ).stub;
      const r = await store.deployments.reserveVersion(doomed, "x", "function", at(0));
      const d = await store.deployments.attachStub(r.id, s.id, at(0));
      await store.db.deleteFrom("workspaces").where("id", "=", doomed).execute();
      assert.equal(await store.deployments.get(d.id), undefined);
    });
  });
}
