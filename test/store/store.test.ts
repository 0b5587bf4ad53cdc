import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { storedStub, stubConfig, stubExtra } from "../tasks/fixtures.ts";

// One suite, run against both engines.

for (const engine of STORE_ENGINES) {
  describe(`store on ${engine.name}`, () => {
    let store: Store;
    let url: string;
    // Cleanups registered while setting up run when this engine's suite ends.
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };

    before(async () => {
      url = await engine.url(suite);
      store = await Store.open(url);
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("migrations are idempotent: reopening applies nothing new and keeps data", async () => {
      const ws = await store.workspaces.create("keep-me");
      const again = await Store.open(url);
      try {
        assert.equal((await again.workspaces.get(ws.id))?.name, "keep-me");
      } finally {
        await again.close();
      }
    });

    test("workspaces: create, get by id and external id, list, duplicate and bad names", async () => {
      const ws = await store.workspaces.create("alpha");
      assert.match(ws.id, /^ws-/);
      assert.equal(ws.externalId, ws.id);
      assert.deepEqual(await store.workspaces.get(ws.id), ws);
      assert.deepEqual(await store.workspaces.byExternalId(ws.externalId), ws);
      assert.ok((await store.workspaces.list()).some((w) => w.id === ws.id));
      await assert.rejects(store.workspaces.create("alpha"), { code: "conflict" });
      await assert.rejects(store.workspaces.create("bad name!"), { code: "invalid_request" });
      assert.equal(await store.workspaces.get("ws-nope"), undefined);
    });

    test("tokens: shown once, stored only as a hash, authenticate, list, revoke, scoped", async () => {
      const a = await store.workspaces.create("tok-a");
      const b = await store.workspaces.create("tok-b");
      const { record, secret } = await store.tokens.create(a.id, { name: "ci", admin: false });
      assert.match(secret, /^bt_[A-Za-z0-9_-]{43}$/);
      const rows = await store.db.selectFrom("tokens").selectAll().where("id", "=", record.id).execute();
      assert.equal(rows.length, 1);
      assert.ok(!JSON.stringify(rows).includes(secret.slice(3)), "secret must not be stored");
      const who = await store.tokens.authenticate(secret);
      assert.equal(who?.workspace.id, a.id);
      assert.equal(who?.token.admin, false);
      assert.equal(await store.tokens.authenticate(`${secret}x`), undefined);
      assert.deepEqual(
        (await store.tokens.list(a.id)).map((t) => t.id),
        [record.id],
      );
      await assert.rejects(store.tokens.revoke(b.id, record.id, { admin: true }), { code: "not_found" });
      const revoked = await store.tokens.revoke(a.id, record.id, { admin: false });
      assert.ok(revoked.revokedAt);
      assert.equal(await store.tokens.authenticate(secret), undefined);
    });

    test("join tokens: verify, revoke", async () => {
      const { record, secret } = await store.joinTokens.create("rack 3");
      assert.match(secret, /^bj_/);
      assert.equal(await store.joinTokens.verify(secret), true);
      assert.equal(await store.joinTokens.verify("bj_wrong"), false);
      await store.joinTokens.revoke(record.id);
      assert.equal(await store.joinTokens.verify(secret), false);
      await assert.rejects(store.joinTokens.revoke(record.id), { code: "not_found" });
    });

    test("agents: join, rejoin keeps the id and join time, heartbeat state and capacity", async () => {
      const first = await store.agents.upsertJoin({
        id: "agent-x1",
        hostname: "gpu-01",
        version: "0.1.0",
        grpcAddress: "10.0.0.5:8421",
      });
      const again = await store.agents.upsertJoin({
        id: "agent-x1",
        hostname: "gpu-01b",
        version: "0.1.1",
        grpcAddress: "10.0.0.6:8421",
      });
      assert.equal(again.joinedAt, first.joinedAt);
      const capacity = {
        cpuCores: 2,
        memoryBytes: 1024,
        disk: { path: "/", totalBytes: 10, freeBytes: 5 },
        gpus: { available: false, reason: "none", toolkit: false, devices: [] },
      };
      const seen = new Date().toISOString();
      await store.agents.recordSeen("agent-x1", { state: "ready", lastSeenAt: seen, capacity });
      const got = await store.agents.get("agent-x1");
      assert.equal(got?.state, "ready");
      assert.equal(got?.hostname, "gpu-01b");
      assert.deepEqual(got?.capacity, capacity);
      await store.agents.setState("agent-x1", "lost");
      assert.equal((await store.agents.get("agent-x1"))?.state, "lost");
    });

    test("stubs: get-or-create by (workspace, name, type); a change raises config_version", async () => {
      const ws = await store.workspaces.create("stub-ws");
      const other = await store.workspaces.create("stub-other");
      const config = stubConfig();
      const input = { name: "square", type: "function", config, extra: stubExtra(), objectId: null };
      const a = await store.stubs.upsert(ws.id, input);
      assert.equal(a.created, true);
      assert.match(a.stub.id, /^stub-/);
      assert.equal(a.stub.configVersion, 1);
      assert.deepEqual(a.stub.config, config);
      // Same content, keys in another order: no change.
      const reordered = JSON.parse(
        JSON.stringify({ ...config, handler: config.handler, runtime: { ...config.runtime } }),
      );
      const same = await store.stubs.upsert(ws.id, { ...input, config: reordered });
      assert.equal(same.changed, false);
      assert.equal(same.stub.configVersion, 1);
      const changed = await store.stubs.upsert(ws.id, { ...input, config: stubConfig({ workers: 4 }) });
      assert.equal(changed.stub.id, a.stub.id);
      assert.equal(changed.stub.configVersion, 2);
      assert.equal(changed.stub.config.workers, 4);
      const endpoint = await store.stubs.upsert(ws.id, { ...input, type: "endpoint" });
      assert.notEqual(endpoint.stub.id, a.stub.id);
      const elsewhere = await store.stubs.upsert(other.id, input);
      assert.notEqual(elsewhere.stub.id, a.stub.id);
      assert.deepEqual(await store.stubs.get(a.stub.id), changed.stub);
    });

    test("objects: one row per workspace and digest; add is idempotent", async () => {
      const ws = await store.workspaces.create("obj-ws");
      const other = await store.workspaces.create("obj-other");
      const sha = "ab".repeat(32);
      const a = await store.objects.add(ws.id, sha, 300 * 1024 * 1024);
      assert.ok(Number.isInteger(a.id));
      assert.equal(a.size, 300 * 1024 * 1024);
      assert.deepEqual(await store.objects.add(ws.id, sha, 1), a);
      assert.equal(await store.objects.find(other.id, sha), undefined);
      const b = await store.objects.add(other.id, sha, 1);
      assert.notEqual(b.id, a.id);
      assert.deepEqual(await store.objects.get(a.id), a);
    });

    test("tasks: batch insert, batched updates with history, results as bytes, live listing", async () => {
      const ws = await store.workspaces.create("task-ws");
      const stub = await storedStub(store.stubs, ws.id);
      const createdAt = new Date().toISOString();
      const ids = Array.from({ length: 1200 }, (_, i) => `task-store${i}`);
      await store.tasks.insertMany(
        ids.map((id) => ({
          id,
          workspaceId: ws.id,
          stubId: stub.id,
          headless: false,
          callbackUrl: null,
          expiresAt: null,
          createdAt,
        })),
      );
      const first = await store.tasks.get(ids[0] as string);
      assert.equal(first?.status, "PENDING");
      assert.equal(first?.attempt, 0);
      assert.equal(first?.result, null);
      const at = new Date().toISOString();
      const result = Buffer.from([0x80, 0x04, 0x00, 0xff]);
      await store.tasks.applyBatch(
        new Map([
          [
            ids[0] as string,
            {
              status: "COMPLETE" as const,
              attempt: 1,
              containerId: "ctr-1",
              result,
              resultJson: "7",
              startedAt: at,
              endedAt: at,
              streamSeq: 2 ** 40,
              updatedAt: at,
            },
          ],
          [ids[1] as string, { status: "RUNNING" as const, attempt: 1, updatedAt: at }],
        ]),
        [
          { taskId: ids[0] as string, status: "RUNNING", attempt: 1, containerId: "ctr-1", reason: null, at },
          {
            taskId: ids[0] as string,
            status: "COMPLETE",
            attempt: 1,
            containerId: "ctr-1",
            reason: null,
            at,
          },
        ],
      );
      const done = await store.tasks.get(ids[0] as string);
      assert.equal(done?.status, "COMPLETE");
      assert.deepEqual(done?.result, result);
      assert.equal(done?.resultJson, "7");
      assert.equal(done?.streamSeq, 2 ** 40);
      assert.equal(done?.endedAt, at);
      assert.deepEqual(
        (await store.tasks.history(ids[0] as string)).map((h) => h.status),
        ["RUNNING", "COMPLETE"],
      );
      // A second end of the task (another attempt) is dropped with its history; the rest of the batch is written.
      const dropped = await store.tasks.applyBatch(
        new Map([
          [ids[0] as string, { status: "FAILED" as const, attempt: 2, updatedAt: at }],
          [ids[2] as string, { status: "RUNNING" as const, attempt: 1, updatedAt: at }],
        ]),
        [
          { taskId: ids[0] as string, status: "FAILED", attempt: 2, containerId: "ctr-2", reason: null, at },
          { taskId: ids[2] as string, status: "RUNNING", attempt: 1, containerId: "ctr-2", reason: null, at },
        ],
      );
      assert.deepEqual([...dropped], [ids[0]]);
      assert.equal((await store.tasks.get(ids[0] as string))?.status, "COMPLETE");
      assert.deepEqual(
        (await store.tasks.history(ids[0] as string)).map((h) => h.status),
        ["RUNNING", "COMPLETE"],
      );
      assert.deepEqual(
        (await store.tasks.history(ids[2] as string)).map((h) => h.status),
        ["RUNNING"],
      );
      const live = (await store.tasks.listLive()).filter((t) => t.stubId === stub.id);
      assert.equal(live.length, 1199);
      assert.equal(live.find((t) => t.id === ids[1])?.status, "RUNNING");
    });

    test("workspaces: the signature token is made once; max_containers defaults to 32", async () => {
      const ws = await store.workspaces.create("sig-ws");
      const [a, b] = await Promise.all([
        store.workspaces.signatureToken(ws.id),
        store.workspaces.signatureToken(ws.id),
      ]);
      assert.ok(a.length > 30);
      assert.equal(a, b);
      assert.equal(await store.workspaces.signatureToken(ws.id), a);
      assert.equal(await store.workspaces.maxContainers(ws.id), 32);
      await assert.rejects(store.workspaces.signatureToken("ws-nope"), { code: "not_found" });
    });

    test("cluster kv: put, overwrite, putIfAbsent keeps the first value", async () => {
      await store.kv.put("k", "v1");
      await store.kv.put("k", "v2");
      assert.equal(await store.kv.get("k"), "v2");
      assert.equal(await store.kv.putIfAbsent("k2", "first"), "first");
      assert.equal(await store.kv.putIfAbsent("k2", "second"), "first");
      assert.equal(await store.kv.get("absent"), undefined);
    });

    test("cluster kv: list by prefix (no neighbour, no LIKE wildcard leaks), delete", async () => {
      await store.kv.put("agent-revoked/agent-b", "2");
      await store.kv.put("agent-revoked/agent-a", "1");
      await store.kv.put("agent-revokedX/agent-c", "3");
      await store.kv.put("agent-nats-nkey/agent-a", "U");
      assert.deepEqual(await store.kv.list("agent-revoked/"), [
        { key: "agent-revoked/agent-a", value: "1" },
        { key: "agent-revoked/agent-b", value: "2" },
      ]);
      await store.kv.delete("agent-revoked/agent-a");
      assert.deepEqual(
        (await store.kv.list("agent-revoked/")).map((r) => r.key),
        ["agent-revoked/agent-b"],
      );
      await assert.rejects(store.kv.list("agent_"), /LIKE wildcard/);
    });
  });
}

test("an unreachable PostgreSQL store fails with one line naming it", async () => {
  await assert.rejects(Store.open("postgres://berth:secret@127.0.0.1:1/none"), (e: Error) => {
    assert.match(e.message, /cannot reach PostgreSQL store postgres:\/\/berth:\*\*\*@127\.0\.0\.1:1\/none/);
    assert.ok(!e.message.includes("secret"));
    return true;
  });
});
