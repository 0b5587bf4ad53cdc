import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import { BerthError } from "../../shared/errors.ts";
import { openSuiteDatabase, STORE_ENGINES } from "../helpers/engines.ts";

// Stack records (coordinator/store/stacks.ts) on both engines: one stack name
// per workspace, versions numbered per stack, one attempt in flight at a time
// (a second begin is a conflict until the first finishes or its lease runs
// out, when it is marked abandoned), only a ready attempt becomes the live
// version, other workspaces see nothing, and all of it survives a reopen.

const code = (c: string) => (e: unknown) => e instanceof BerthError && e.code === c;
const T0 = "2026-11-26T10:00:00.000Z";
const at = (s: number) => new Date(Date.parse(T0) + s * 1000).toISOString();

for (const engine of STORE_ENGINES) {
  describe(`stacks on ${engine.name}`, async () => {
    const { store, url } = await openSuiteDatabase(engine);
    const ws = (await store.workspaces.create("stacks")).id;
    const other = (await store.workspaces.create("elsewhere")).id;

    test("attempts are versions; only a ready one goes live; all of it survives a reopen", async () => {
      const s = await store.stacks.create(ws, "shop", at(0));
      assert.equal(s.currentVersion, 0);
      await assert.rejects(store.stacks.create(ws, "shop", at(0)), code("conflict"));
      // The same name in another workspace is another stack.
      await store.stacks.create(other, "shop", at(0));

      const v1 = await store.stacks.begin(s.id, { members: ["a"] }, [{ name: "a" }], at(1), at(100));
      assert.equal(v1.version, 1);
      assert.equal(v1.status, "applying");
      assert.equal((await store.stacks.get(ws, s.id))?.applyingVersion, 1);
      await store.stacks.progress(s.id, 1, [{ name: "a", state: "ready" }], at(2), at(200));
      assert.equal((await store.stacks.get(ws, s.id))?.leaseUntil, at(200), "progress renews the lease");
      assert.equal(
        await store.stacks.finish(
          s.id,
          1,
          { status: "ready", members: [{ name: "a", state: "ready" }] },
          at(3),
        ),
        true,
      );

      const v2 = await store.stacks.begin(s.id, { members: ["a", "b"] }, [], at(4), at(100));
      assert.equal(v2.version, 2);
      const failure = { member: "b", reason: "its container does not start" };
      assert.equal(
        await store.stacks.finish(s.id, 2, { status: "rolled_back", members: [], failure }, at(5)),
        true,
      );

      const reopened = await Store.open(url);
      try {
        const back = await reopened.stacks.get(ws, s.id);
        assert.equal(back?.currentVersion, 1, "a rolled-back attempt does not go live");
        assert.equal(back?.applyingVersion, null);
        const versions = await reopened.stacks.versions(s.id);
        assert.deepEqual(
          versions.map((v) => [v.version, v.status, v.failure]),
          [
            [2, "rolled_back", failure],
            [1, "ready", null],
          ],
        );
        assert.deepEqual((await reopened.stacks.version(s.id, 1))?.members, [{ name: "a", state: "ready" }]);
        assert.deepEqual((await reopened.stacks.version(s.id, 1))?.spec, { members: ["a"] });
      } finally {
        await reopened.close();
      }
    });

    test("another workspace's stack is not found; lists are per workspace", async () => {
      const s = await store.stacks.create(ws, "private", at(0));
      assert.equal(await store.stacks.get(other, s.id), undefined);
      assert.ok((await store.stacks.list(ws)).some((x) => x.id === s.id));
      assert.ok(!(await store.stacks.list(other)).some((x) => x.id === s.id));
      assert.equal((await store.stacks.byName(ws, "private"))?.id, s.id);
      assert.equal(await store.stacks.byName(other, "private"), undefined);
    });

    test("one attempt at a time: a second begin is a conflict; an expired lease is taken over", async () => {
      const s = await store.stacks.create(ws, "busy", at(0));
      await store.stacks.begin(s.id, {}, [], at(1), at(60));
      await assert.rejects(store.stacks.begin(s.id, {}, [], at(2), at(60)), (e: unknown) => {
        assert.ok(code("conflict")(e));
        assert.match((e as Error).message, /stack busy is being applied \(version 1\)/);
        return true;
      });
      // Both at once: exactly one takes the lease.
      const s2 = await store.stacks.create(ws, "race", at(0));
      const both = await Promise.allSettled([
        store.stacks.begin(s2.id, {}, [], at(1), at(60)),
        store.stacks.begin(s2.id, {}, [], at(1), at(60)),
      ]);
      assert.equal(both.filter((r) => r.status === "fulfilled").length, 1, JSON.stringify(both));
      assert.ok(both.some((r) => r.status === "rejected" && code("conflict")(r.reason)));

      // Its coordinator stopped: past the lease, the next apply takes over and the old attempt is abandoned.
      const v2 = await store.stacks.begin(s.id, {}, [], at(61), at(120));
      assert.equal(v2.version, 2);
      const v1 = await store.stacks.version(s.id, 1);
      assert.equal(v1?.status, "abandoned");
      assert.match(v1?.failure?.reason ?? "", /stopped before it ended/);
      // The abandoned attempt's late finish neither goes live nor frees the new attempt's lease.
      assert.equal(await store.stacks.finish(s.id, 1, { status: "ready", members: [] }, at(62)), false);
      const now = await store.stacks.get(ws, s.id);
      assert.equal(now?.currentVersion, 0);
      assert.equal(now?.applyingVersion, 2);
      assert.equal((await store.stacks.version(s.id, 1))?.status, "abandoned");
    });
  });
}
