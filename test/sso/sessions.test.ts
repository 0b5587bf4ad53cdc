// Single sign-on sessions on both store engines (docs/sso.md): the operator's
// group mapping, the workspace a login asks for, sessions as token-like
// credentials that expire and are revoked, and the config's checks.

import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import type { Change } from "../../coordinator/http/index.ts";
import type { Store } from "../../coordinator/records.ts";
import { resolveOidcOptions } from "../../coordinator/sso/options.ts";
import { SessionService } from "../../coordinator/sso/sessions.ts";
import type { Workspace } from "../../coordinator/store/index.ts";
import { STORE_ENGINES, openSuiteStore } from "../helpers/engines.ts";

const origin = { clientIp: "127.0.0.1", userAgent: "sessions-test", route: "/api/v1/auth/session" };
const who = (groups: unknown) => ({
  subject: "u-1",
  name: "dana@example.org",
  claims: { sub: "u-1", groups },
});

for (const engine of STORE_ENGINES) {
  describe(`single sign-on sessions on ${engine.name}`, async () => {
    const store: Store = await openSuiteStore(engine);
    let ml: Workspace;
    let web: Workspace;
    let sessions: SessionService;
    const recorded: Change[] = [];

    before(async () => {
      ml = await store.workspaces.create("ml");
      web = await store.workspaces.create("web");
      const options = resolveOidcOptions(
        {
          issuer: "https://idp.example.org/realms/berth",
          clientId: "berth",
          mappings: [
            { group: "ml-viewers", workspace: "ml", role: "viewer" },
            { group: "ml-admins", workspace: ml.externalId, role: "admin" },
            { group: "web-runners", workspace: "web", role: "runner" },
            { group: "gone", workspace: "no-such-workspace", role: "admin" },
          ],
          sessionTtl: "2h",
        },
        "https://berth.example.org",
      );
      sessions = new SessionService({
        options,
        tokens: store.tokens,
        workspaces: store.workspaces,
        audit: { record: async (c) => void recorded.push(c) },
      });
    });

    test("the strongest role a user's groups give in each workspace, in the mapping's order", async () => {
      const grants = await sessions.grants(["web-runners", "ml-viewers", "ml-admins", "gone"]);
      assert.deepEqual(
        grants.map((g) => [g.workspace.name, g.role]),
        [
          ["ml", "admin"],
          ["web", "runner"],
        ],
      );
    });

    test("a login gets the first workspace mapped, or the one it asks for; a session acts like a token of its role", async () => {
      const first = await sessions.signIn(who(["web-runners", "ml-viewers"]), { origin });
      assert.equal(first.workspace.name, "ml");
      assert.equal(first.session.role, "viewer");
      assert.equal(first.session.kind, "session");
      assert.equal(first.session.subject, "u-1");
      assert.ok(first.secret.startsWith("bss_"));
      const expires = Date.parse(first.session.expiresAt ?? "");
      assert.ok(
        expires > Date.now() + 3600_000 && expires <= Date.now() + 2 * 3600_000,
        first.session.expiresAt ?? "",
      );
      const p = await store.tokens.authenticate(first.secret);
      assert.equal(p?.workspace.id, ml.id);
      assert.equal(p?.token.role, "viewer");
      assert.equal(recorded.at(-1)?.action, "session.create");
      assert.equal(recorded.at(-1)?.objectId, first.session.id);

      const asked = await sessions.signIn(who("web-runners"), { workspace: "web", origin });
      assert.equal(asked.workspace.id, web.id);
      assert.equal(asked.session.role, "runner");
      await assert.rejects(sessions.signIn(who(["web-runners"]), { workspace: "ml", origin }), {
        code: "permission_denied",
        message: /has no role in workspace ml; their groups map to web/,
      });
    });

    test("a user in no mapped group is refused, naming the groups the config knows", async () => {
      await assert.rejects(sessions.signIn(who(["sales", 7]), { origin }), {
        code: "permission_denied",
        message:
          /dana@example\.org is in no group .*lists sales; the mapped groups are ml-viewers, ml-admins, web-runners, gone/,
      });
      await assert.rejects(sessions.signIn(who(undefined), { origin }), { message: /lists no groups/ });
    });

    test("sessions expire, are revoked, and are listed apart from API tokens", async () => {
      const { record, secret } = await store.tokens.createSession(web.id, {
        name: "sso:late",
        role: "developer",
        subject: "late",
        expiresAt: new Date(Date.now() - 1000),
      });
      assert.equal(await store.tokens.authenticate(secret), undefined, "an expired session is refused");
      const live = await sessions.signIn(who("web-runners"), { workspace: "web", origin });
      const api = await store.tokens.create(web.id, { name: "ci" });
      assert.deepEqual(
        (await store.tokens.list(web.id)).map((t) => t.id),
        [api.record.id],
        "the token list holds API tokens only",
      );
      const listed = (await store.tokens.list(web.id, { kind: "session" })).map((t) => t.id);
      assert.ok(listed.includes(record.id) && listed.includes(live.session.id));
      await assert.rejects(store.tokens.revokeSession(web.id, api.record.id), { code: "not_found" });
      await assert.rejects(store.tokens.revokeSession(ml.id, live.session.id), { code: "not_found" });
      const revoked = await store.tokens.revokeSession(web.id, live.session.id);
      assert.ok(revoked.revokedAt);
      assert.equal(await store.tokens.authenticate(live.secret), undefined, "a revoked session is refused");
    });
  });
}

describe("the oidc config's checks", () => {
  const ok = {
    issuer: "https://idp.example.org",
    clientId: "berth",
    mappings: [{ group: "g", workspace: "w", role: "viewer" as const }],
  };
  const check = (o: object) => () =>
    resolveOidcOptions({ ...ok, ...o } as never, "https://berth.example.org");

  test("defaults", () => {
    const r = resolveOidcOptions(ok, "https://berth.example.org/");
    assert.equal(r.redirectUrl.href, "https://berth.example.org/auth/callback");
    assert.equal(r.groupsClaim, "groups");
    assert.equal(r.cliClientId, "berth");
    assert.equal(r.sessionTtlMs, 12 * 3600_000);
    assert.equal(resolveOidcOptions({ ...ok, sessionTtl: 90 }, "https://b").sessionTtlMs, 90_000);
  });

  test("mistakes stop the coordinator with their cause", () => {
    assert.throws(
      check({ issuer: "http://idp.example.org" }),
      /must be https:\/\/ \(plain http only to 127\.0\.0\.1/,
    );
    assert.throws(check({ clientId: "" }), /oidc\.clientId is required/);
    assert.throws(check({ mappings: [] }), /nobody could sign in/);
    assert.throws(
      check({ mappings: [{ group: "g", workspace: "w", role: "owner" }] }),
      /mappings\[0\]\.role "owner"/,
    );
    assert.throws(check({ sessionTtl: "forever" }), /sessionTtl "forever"/);
    assert.throws(check({ scopes: ["email"] }), /must include "openid"/);
  });
});
