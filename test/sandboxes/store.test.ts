// Sandbox records and snapshots on SQLite and PostgreSQL: states, expiry,
// touch, TTL changes, workspace scoping.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

for (const engine of STORE_ENGINES) {
  describe(`sandbox records on ${engine.name}`, () => {
    let store: Store;
    let ws: string;
    let otherWs: string;
    let stubId: string;
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };
    const at = (s: number) => new Date(Date.UTC(2030, 0, 1, 0, 0, s)).toISOString();
    const insert = (id: string, ttlSeconds: number, s = 0, agentId = "agent-a") =>
      store.sandboxes.insert({
        id,
        workspaceId: ws,
        stubId,
        agentId,
        kind: "sandbox",
        ttlSeconds,
        ports: [8000],
        egress: { mode: "allow", cidrs: ["10.0.0.0/8"] },
        imageId: null,
        at: at(s),
      });

    before(async () => {
      store = await Store.open(await engine.url(suite));
      ws = (await store.workspaces.create("sb-main")).id;
      otherWs = (await store.workspaces.create("sb-other")).id;
      stubId = (
        await store.stubs.upsert(ws, {
          name: "sb",
          type: "sandbox",
          config: stubConfig(),
          extra: stubExtra(),
          objectId: null,
        })
      ).stub.id;
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("insert starts in starting; markRunning once; markTerminated once; find is workspace-scoped", async () => {
      const s = await insert("ctr-1", 60);
      assert.equal(s.status, "starting");
      assert.equal(s.expiresAt, at(60));
      assert.equal(await store.sandboxes.markRunning("ctr-1"), true);
      assert.equal(await store.sandboxes.markRunning("ctr-1"), false);
      const got = await store.sandboxes.find(ws, "ctr-1");
      assert.deepEqual(got?.egress, { mode: "allow", cidrs: ["10.0.0.0/8"] });
      assert.deepEqual(got?.ports, [8000]);
      assert.equal(await store.sandboxes.find(otherWs, "ctr-1"), undefined);
      assert.deepEqual(
        (await store.sandboxes.listLive("agent-a")).map((x) => x.id),
        ["ctr-1"],
      );
      assert.equal(await store.sandboxes.markTerminated("ctr-1", at(5), "terminated by request"), true);
      assert.equal(await store.sandboxes.markTerminated("ctr-1", at(6), "again"), false);
      const ended = await store.sandboxes.get("ctr-1");
      assert.deepEqual(
        [ended?.status, ended?.terminatedReason, ended?.expiresAt],
        ["terminated", "terminated by request", null],
      );
      assert.deepEqual(await store.sandboxes.listLive("agent-a"), []);
    });

    test("expiry follows activity and the TTL; -1 never expires", async () => {
      await insert("ctr-2", 10, 0);
      await insert("ctr-3", -1, 0);
      await store.sandboxes.markRunning("ctr-2");
      await store.sandboxes.markRunning("ctr-3");
      assert.deepEqual(
        (await store.sandboxes.listExpired(at(10))).map((s) => s.id),
        ["ctr-2"],
      );
      const touched = await store.sandboxes.touch("ctr-2", at(8));
      assert.equal(touched?.expiresAt, at(18));
      // An older activity does not move it back.
      assert.equal((await store.sandboxes.touch("ctr-2", at(3)))?.expiresAt, at(18));
      assert.deepEqual(await store.sandboxes.listExpired(at(17)), []);
      assert.equal(await store.sandboxes.setTtl("ctr-2", -1, at(9)), null);
      assert.equal(await store.sandboxes.setTtl("ctr-3", 5, at(9)), at(14));
      assert.deepEqual(
        (await store.sandboxes.listExpired(at(3600))).map((s) => s.id),
        ["ctr-3"],
      );
      await store.sandboxes.setEgress("ctr-3", { mode: "block" });
      await store.sandboxes.setPorts("ctr-3", [8000, 9000]);
      const s3 = await store.sandboxes.get("ctr-3");
      assert.deepEqual([s3?.egress, s3?.ports], [{ mode: "block" }, [8000, 9000]]);
      assert.deepEqual((await store.sandboxes.list(ws, { status: "running" })).map((s) => s.id).sort(), [
        "ctr-2",
        "ctr-3",
      ]);
    });

    test("filesystem images and memory snapshots, per workspace", async () => {
      await store.sandboxes.insertImage({
        id: "img-1",
        workspaceId: ws,
        agentId: "agent-a",
        imageRef: "berth-snapshots/img-1:latest",
        sourceSandboxId: "ctr-2",
        sizeBytes: 5_000_000_000,
        createdAt: at(1),
      });
      const img = await store.sandboxes.findImage(ws, "img-1");
      assert.deepEqual(
        [img?.agentId, img?.imageRef, img?.sizeBytes],
        ["agent-a", "berth-snapshots/img-1:latest", 5_000_000_000],
      );
      assert.equal(await store.sandboxes.findImage(otherWs, "img-1"), undefined);
      await store.sandboxes.insertSnapshot({
        id: "snap-1",
        workspaceId: ws,
        agentId: "agent-b",
        sourceSandboxId: "ctr-2",
        stubId,
        ports: [8000],
        egress: { mode: "open" },
        sizeBytes: 12,
        createdAt: at(2),
      });
      const snap = await store.sandboxes.findSnapshot(ws, "snap-1");
      assert.deepEqual(
        [snap?.agentId, snap?.stubId, snap?.ports, snap?.egress],
        ["agent-b", stubId, [8000], { mode: "open" }],
      );
      assert.equal(await store.sandboxes.findSnapshot(otherWs, "snap-1"), undefined);
    });
  });
}
