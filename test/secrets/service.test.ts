// The secret service on both store engines: sealing at rest, the name and
// value rules, conflicts, listing without values, resolve and wrong keys.

import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { SECRET_VALUE_MAX_BYTES, SecretService } from "../../coordinator/secrets/index.ts";
import { Store } from "../../coordinator/records.ts";
import { ENGINES, randomKey } from "./helpers.ts";

for (const engine of ENGINES) {
  describe(`secrets on ${engine.name}`, () => {
    let store: Store;
    let url: string;
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };
    const key = randomKey();
    let secrets: SecretService;

    before(async () => {
      url = await engine.url(suite);
      store = await Store.open(url);
      secrets = new SecretService({ db: store.db, key });
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("create, list (no values), update, resolve, delete", async () => {
      const ws = await store.workspaces.create(`life-${engine.name}`);
      const made = await secrets.create(ws.id, "HF_TOKEN", "hf_first");
      assert.equal(made.name, "HF_TOKEN");
      assert.equal(made.createdAt, made.updatedAt);
      await secrets.create(ws.id, "A_KEY", "a");
      const listed = await secrets.list(ws.id);
      assert.deepEqual(
        listed.map((s) => s.name),
        ["A_KEY", "HF_TOKEN"],
      );
      assert.ok(!JSON.stringify(listed).includes("hf_first"));
      assert.deepEqual(await secrets.resolve(ws.id, ["HF_TOKEN", "A_KEY", "HF_TOKEN"]), {
        HF_TOKEN: "hf_first",
        A_KEY: "a",
      });
      await new Promise((r) => setTimeout(r, 5));
      const updated = await secrets.update(ws.id, "HF_TOKEN", "hf_second");
      assert.equal(updated.createdAt, made.createdAt);
      assert.ok(updated.updatedAt > made.updatedAt, "update moves updated_at");
      assert.deepEqual(await secrets.resolve(ws.id, ["HF_TOKEN"]), { HF_TOKEN: "hf_second" });
      assert.deepEqual(await secrets.resolve(ws.id, []), {});
      await secrets.delete(ws.id, "HF_TOKEN");
      assert.deepEqual(
        (await secrets.list(ws.id)).map((s) => s.name),
        ["A_KEY"],
      );
      await assert.rejects(secrets.delete(ws.id, "HF_TOKEN"), {
        code: "not_found",
        message: "secret HF_TOKEN not found",
      });
      await assert.rejects(secrets.update(ws.id, "HF_TOKEN", "x"), { code: "not_found" });
    });

    test("an existing name is a conflict, also under concurrent creates; workspaces are separate", async () => {
      const a = await store.workspaces.create(`conf-a-${engine.name}`);
      const b = await store.workspaces.create(`conf-b-${engine.name}`);
      await secrets.create(a.id, "DB_PASSWORD", "one");
      await assert.rejects(secrets.create(a.id, "DB_PASSWORD", "two"), {
        code: "conflict",
        message: /secret DB_PASSWORD already exists in this workspace/,
      });
      assert.deepEqual(
        await secrets.resolve(a.id, ["DB_PASSWORD"]),
        { DB_PASSWORD: "one" },
        "the first value stays",
      );
      // Same name in another workspace is another secret.
      await secrets.create(b.id, "DB_PASSWORD", "bee");
      assert.deepEqual(await secrets.resolve(b.id, ["DB_PASSWORD"]), { DB_PASSWORD: "bee" });
      const race = await Promise.allSettled(
        Array.from({ length: 5 }, (_, i) => secrets.create(a.id, "RACE", `v${i}`)),
      );
      assert.equal(race.filter((r) => r.status === "fulfilled").length, 1);
      for (const r of race) if (r.status === "rejected") assert.equal(r.reason.code, "conflict");
    });

    test("the database holds no value: sealed with a fresh nonce per write and the key's id, not the key", async () => {
      const ws = await store.workspaces.create(`sealed-${engine.name}`);
      const value = `plain-${"v".repeat(40)}-marker`;
      await secrets.create(ws.id, "SEALED_ONE", value);
      await secrets.create(ws.id, "SEALED_TWO", value);
      const rows = await store.db
        .selectFrom("secrets")
        .selectAll()
        .where("workspace_id", "=", ws.id)
        .execute();
      assert.equal(rows.length, 2);
      for (const r of rows) {
        const ct = Buffer.from(r.ciphertext);
        assert.equal(r.nonce.length, 12);
        assert.equal(ct.length, Buffer.byteLength(value) + 16, "ciphertext plus the GCM tag");
        assert.equal(ct.indexOf(Buffer.from(value)), -1);
        assert.equal(ct.indexOf(Buffer.from("marker")), -1);
        assert.equal(r.key_id, key.id);
        assert.ok(!r.key_id.includes(key.bytes.toString("hex").slice(0, 8)));
      }
      const [one, two] = rows;
      assert.ok(one && two);
      assert.notDeepEqual(Buffer.from(one.nonce), Buffer.from(two.nonce));
      assert.notDeepEqual(Buffer.from(one.ciphertext), Buffer.from(two.ciphertext));
      const before = Buffer.from(one.nonce);
      await secrets.update(ws.id, one.name, value);
      const again = await store.db
        .selectFrom("secrets")
        .select("nonce")
        .where("workspace_id", "=", ws.id)
        .where("name", "=", one.name)
        .executeTakeFirstOrThrow();
      assert.notDeepEqual(Buffer.from(again.nonce), before, "an update seals with a new nonce");
      if (engine.name === "sqlite") {
        const path = url.slice("sqlite:".length);
        for (const f of [path, `${path}-wal`]) {
          if (existsSync(f))
            assert.equal(readFileSync(f).indexOf(Buffer.from("marker")), -1, `${f} holds the value`);
        }
      }
    });

    test("resolve names every missing secret", async () => {
      const ws = await store.workspaces.create(`missing-${engine.name}`);
      await secrets.create(ws.id, "HAVE_IT", "x");
      await assert.rejects(
        secrets.resolve(ws.id, ["NOPE_ONE", "HAVE_IT", "NOPE_TWO"]),
        (e: Error & { code: string }) => {
          assert.equal(e.code, "not_found");
          assert.match(e.message, /^secrets NOPE_ONE, NOPE_TWO not found in this workspace/);
          return true;
        },
      );
      const other = await store.workspaces.create(`missing-other-${engine.name}`);
      await assert.rejects(secrets.resolve(other.id, ["HAVE_IT"]), {
        code: "not_found",
        message: /^secret HAVE_IT not found/,
      });
    });

    test("a wrong key is a clear error naming the secret, never garbage", async () => {
      const ws = await store.workspaces.create(`wrongkey-${engine.name}`);
      await secrets.create(ws.id, "API_KEY", "right");
      const other = new SecretService({ db: store.db, key: randomKey("/etc/other.key") });
      await assert.rejects(other.resolve(ws.id, ["API_KEY"]), (e: Error & { code: string }) => {
        assert.equal(e.code, "failed_precondition");
        assert.match(e.message, /cannot decrypt secret API_KEY \(sealed with key k1-[0-9a-f]{16}\)/);
        assert.match(e.message, /from \/etc\/other\.key/);
        assert.match(e.message, /every coordinator of a store needs the same secrets key/);
        assert.ok(!e.message.includes("right"));
        return true;
      });
      // Listing needs no key; the right key still opens it.
      assert.deepEqual(
        (await other.list(ws.id)).map((s) => s.name),
        ["API_KEY"],
      );
      assert.deepEqual(await secrets.resolve(ws.id, ["API_KEY"]), { API_KEY: "right" });
    });

    test("a sealed value moved to another name or workspace does not open (bound by the AAD)", async () => {
      const ws = await store.workspaces.create(`aad-${engine.name}`);
      await secrets.create(ws.id, "ORIGINAL", "top secret");
      await secrets.create(ws.id, "DECOY", "decoy");
      const src = await store.db
        .selectFrom("secrets")
        .selectAll()
        .where("workspace_id", "=", ws.id)
        .where("name", "=", "ORIGINAL")
        .executeTakeFirstOrThrow();
      await store.db
        .updateTable("secrets")
        .set({ ciphertext: src.ciphertext, nonce: src.nonce })
        .where("workspace_id", "=", ws.id)
        .where("name", "=", "DECOY")
        .execute();
      await assert.rejects(secrets.resolve(ws.id, ["DECOY"]), {
        code: "failed_precondition",
        message: /^cannot decrypt secret DECOY with this coordinator's key/,
      });
    });

    test("names must be environment variable names, not BERTH_*, at most 128 characters", async () => {
      const ws = await store.workspaces.create(`names-${engine.name}`);
      const bad: [string, RegExp][] = [
        ["", /needs a name/],
        ["1ABC", /not an environment variable name/],
        ["MY-KEY", /not an environment variable name/],
        ["MY KEY", /not an environment variable name/],
        ["KÉY", /not an environment variable name/],
        ["BERTH_TOKEN", /reserved: berth sets the BERTH_\* variables itself/],
        ["A".repeat(129), /129 characters; at most 128/],
      ];
      for (const [name, message] of bad) {
        await assert.rejects(secrets.create(ws.id, name, "v"), { code: "invalid_request", message }, name);
      }
      for (const name of ["_X", "a", "lower_case_9", "A".repeat(128), "BERTHA", "berth_lower"]) {
        await secrets.create(ws.id, name, "v");
      }
    });

    test("values are UTF-8 text of at most 64 KiB with no NUL", async () => {
      const ws = await store.workspaces.create(`values-${engine.name}`);
      const max = "é".repeat(SECRET_VALUE_MAX_BYTES / 2);
      await secrets.create(ws.id, "BIG", max);
      assert.equal((await secrets.resolve(ws.id, ["BIG"])).BIG, max);
      await assert.rejects(secrets.create(ws.id, "TOO_BIG", `${max}x`), {
        code: "invalid_request",
        message: "the value of secret TOO_BIG is 65537 bytes; at most 65536 (64 KiB)",
      });
      await assert.rejects(secrets.update(ws.id, "BIG", "a\0b"), { code: "invalid_request", message: /NUL/ });
      await assert.rejects(secrets.create(ws.id, "HALF", "\ud800"), {
        code: "invalid_request",
        message: /not valid UTF-8/,
      });
      await secrets.create(ws.id, "MULTI_LINE", "line one\nline two\n  ünïcødé ✓\n");
      await secrets.create(ws.id, "EMPTY", "");
      assert.deepEqual(await secrets.resolve(ws.id, ["MULTI_LINE", "EMPTY"]), {
        MULTI_LINE: "line one\nline two\n  ünïcødé ✓\n",
        EMPTY: "",
      });
    });

    test("deleting a workspace deletes its secrets (foreign key cascade)", async () => {
      const ws = await store.workspaces.create(`cascade-${engine.name}`);
      await secrets.create(ws.id, "GONE_WITH_IT", "x");
      await store.db.deleteFrom("workspaces").where("id", "=", ws.id).execute();
      const left = await store.db
        .selectFrom("secrets")
        .select("name")
        .where("workspace_id", "=", ws.id)
        .execute();
      assert.deepEqual(left, []);
    });
  });
}
