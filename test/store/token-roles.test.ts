// Token roles in the store (docs/roles.md): migration 0022 gives tokens made
// before roles the role that keeps what they could do (admin tokens: admin,
// the others: developer), new tokens carry a role and may be narrowed to
// deployments, and admin tokens are revoked only by admin tokens.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Database } from "../../coordinator/store/index.ts";

/** The tokens table as it was before migration 0022. */
type Before = Pick<Database, "workspaces"> & {
  tokens: Omit<Database["tokens"], "role" | "deployments" | "kind" | "expires_at" | "subject">;
};
import { STORE_ENGINES, openSuiteStoreFrom } from "../helpers/engines.ts";

for (const engine of STORE_ENGINES) {
  describe(`token roles on ${engine.name}`, async () => {
    // A store from before roles, with an admin token and a plain one.
    const store = await openSuiteStoreFrom<Before>(engine, "0021_sandbox_exit_code", async (db) => {
      const at = new Date().toISOString();
      await db
        .insertInto("workspaces")
        .values({ id: "ws-old", external_id: "ws-old", name: "old", created_at: at })
        .execute();
      for (const [id, isAdmin] of [
        ["tok-old-admin", 1],
        ["tok-old-plain", 0],
      ] as const) {
        await db
          .insertInto("tokens")
          .values({
            id,
            workspace_id: "ws-old",
            name: id,
            token_hash: `hash-${id}`,
            prefix: "bt_old",
            is_admin: isAdmin,
            created_at: at,
          })
          .execute();
      }
    });

    test("migration 0022: admin tokens become admins (and stay cluster admins), the others developers", async () => {
      const byId = new Map((await store.tokens.list("ws-old")).map((t) => [t.id, t]));
      assert.deepEqual(
        [
          byId.get("tok-old-admin")?.role,
          byId.get("tok-old-admin")?.admin,
          byId.get("tok-old-admin")?.deployments,
        ],
        ["admin", true, null],
      );
      assert.deepEqual(
        [
          byId.get("tok-old-plain")?.role,
          byId.get("tok-old-plain")?.admin,
          byId.get("tok-old-plain")?.deployments,
        ],
        ["developer", false, null],
      );
    });

    test("a new token carries its role and deployments; a cluster admin token is an admin", async () => {
      const ws = await store.workspaces.create(`roles-${engine.name}`);
      const runner = await store.tokens.create(ws.id, {
        name: "web",
        role: "runner",
        deployments: ["shop", "shop"],
      });
      assert.deepEqual([runner.record.role, runner.record.deployments], ["runner", ["shop"]]);
      const who = await store.tokens.authenticate(runner.secret);
      assert.deepEqual(
        [who?.token.role, who?.token.deployments, who?.token.admin],
        ["runner", ["shop"], false],
      );
      assert.equal((await store.tokens.create(ws.id)).record.role, "developer");
      assert.equal((await store.tokens.create(ws.id, { admin: true })).record.role, "admin");
      await assert.rejects(store.tokens.create(ws.id, { admin: true, role: "viewer" }), {
        code: "invalid_request",
        message: /cluster admin token is a workspace admin/,
      });
      await assert.rejects(store.tokens.create(ws.id, { deployments: [] }), {
        code: "invalid_request",
        message: /deployments is empty/,
      });
      await assert.rejects(store.tokens.create(ws.id, { deployments: ["../x"] }), {
        code: "invalid_request",
        message: /deployment name "..\/x" is invalid/,
      });
    });

    test("only an admin token revokes a workspace admin's token; only a cluster admin a cluster admin's", async () => {
      const ws = await store.workspaces.create(`revoke-${engine.name}`);
      const wsAdmin = await store.tokens.create(ws.id, { role: "admin" });
      const cluster = await store.tokens.create(ws.id, { admin: true });
      await assert.rejects(
        store.tokens.revoke(ws.id, wsAdmin.record.id, { admin: false, role: "developer" }),
        {
          code: "permission_denied",
        },
      );
      await assert.rejects(store.tokens.revoke(ws.id, cluster.record.id, { admin: false, role: "admin" }), {
        code: "permission_denied",
      });
      assert.ok(
        (await store.tokens.revoke(ws.id, wsAdmin.record.id, { admin: false, role: "admin" })).revokedAt,
      );
      assert.ok(
        (await store.tokens.revoke(ws.id, cluster.record.id, { admin: true, role: "admin" })).revokedAt,
      );
    });
  });
}
