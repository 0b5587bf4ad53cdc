// The audit trail (docs/roles.md): a change of each kind made through the
// API — deploy, delete, secret write, token create and revoke, agent revoke,
// limits change — is read back from GET /api/v1/audit/{ws} with who made it,
// from where, what and how it ended; a refused change is recorded as denied;
// the trail pages like the other lists and is the workspace's own; and a
// webhook subscribed to audit.* receives each record as a signed CloudEvent.

import assert from "node:assert/strict";
import { createHmac, timingSafeEqual } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { type FuzzFixture, startFuzzFixture } from "../fuzz/fixture.ts";
import { deployInput } from "../deployments/helpers.ts";
import { bearer } from "../helpers/auth.ts";
import { startReceiver, webhookSystem } from "../webhooks/helpers.ts";

interface AuditJson {
  id: string;
  at: string;
  token: { id: string; name: string; role: string; cluster_admin: boolean };
  client_ip: string;
  user_agent: string;
  action: string;
  method: string;
  route: string;
  object_id: string | null;
  status: number;
  outcome: string;
  error_code: string | null;
}

function verifies(secret: string, rawBody: string, header: string | string[] | undefined): boolean {
  if (typeof header !== "string") return false;
  const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(rawBody).digest("hex")}`);
  const got = Buffer.from(header);
  return got.length === expected.length && timingSafeEqual(got, expected);
}

describe("audit trail", () => {
  let fz: FuzzFixture;
  let admin: { secret: string; id: string };
  let viewer: string;
  let opsWs: string;
  const cleanups: (() => unknown)[] = [];
  const hooks = { after: (fn: () => unknown) => cleanups.push(fn) };
  const UA = "audit-test/1.0";

  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  before(async () => {
    fz = await startFuzzFixture(hooks);
    const { x } = fz.f;
    const made = await x.h.store.tokens.create(x.a.id, { name: "alice", role: "admin" });
    admin = { secret: made.secret, id: made.record.id };
    viewer = (await x.h.store.tokens.create(x.a.id, { name: "victor", role: "viewer" })).secret;
    opsWs = (await x.h.store.tokens.authenticate(fz.tokens.admin))?.workspace.externalId as string;
  });

  const ask = (method: string, url: string, token: string, payload?: object) =>
    fz.f.x.app.inject({
      method: method as "POST",
      url,
      headers: { ...bearer(token), "user-agent": UA },
      ...(payload ? { payload } : {}),
      remoteAddress: "203.0.113.7",
    });
  const trail = async (ws: string, token: string, query = ""): Promise<AuditJson[]> => {
    await fz.f.x.audit.idle();
    const r = await ask("GET", `/api/v1/audit/${ws}${query}`, token);
    assert.equal(r.statusCode, 200, r.body);
    return r.json().records;
  };

  test("a change of each kind is read back with who, when, from where, what and its outcome", async () => {
    const { x } = fz.f;
    const ws = x.a.externalId;
    const dep = deployInput("audited-web", "endpoint");
    const deployed = await ask("POST", "/api/v1/gateway/deployments", admin.secret, {
      name: dep.name,
      type: dep.kind,
      config: dep.config,
      extra: dep.extra,
    });
    assert.equal(deployed.json().ok, true, deployed.body);
    const depId = deployed.json().deployment.id as string;
    const steps: [string, string, object | undefined, number][] = [
      ["POST", `/api/v1/secret/${ws}`, { name: "AUDITED", value: "s3cret-value" }, 201],
      ["PUT", `/api/v1/secret/${ws}/AUDITED`, { value: "other-value" }, 200],
      ["DELETE", `/api/v1/deployment/${ws}/${depId}`, undefined, 204],
    ];
    for (const [method, url, payload, status] of steps) {
      const r = await ask(method, url, admin.secret, payload);
      assert.equal(r.statusCode, status, `${method} ${url}: ${r.body}`);
    }
    const token = await ask("POST", "/api/v1/token", admin.secret, { name: "web", role: "runner" });
    assert.equal(token.statusCode, 201, token.body);
    const tokenId = token.json().token_info.id as string;
    assert.equal((await ask("DELETE", `/api/v1/token/${tokenId}`, admin.secret)).statusCode, 200);
    // The cluster admin's changes are recorded in its own token's workspace.
    const revoke = await ask("POST", `/api/v1/agents/${fz.adminValues.agentId}/revoke`, fz.tokens.admin);
    assert.ok(revoke.statusCode < 300, revoke.body);
    const limits = await ask("PUT", `/api/v1/workspace/${ws}/limits`, fz.tokens.admin, { max_containers: 9 });
    assert.equal(limits.statusCode, 200, limits.body);

    const records = await trail(ws, admin.secret);
    const byAction = new Map(records.map((r) => [r.action, r]));
    for (const action of [
      "deployment.deploy",
      "secret.create",
      "secret.update",
      "deployment.delete",
      "token.create",
      "token.revoke",
    ]) {
      const r = byAction.get(action);
      assert.ok(r, `${action} recorded: ${records.map((x) => x.action).join(", ")}`);
      assert.deepEqual(r.token, { id: admin.id, name: "alice", role: "admin", cluster_admin: false }, action);
      assert.equal(r.client_ip, "203.0.113.7", action);
      assert.equal(r.user_agent, UA, action);
      assert.equal(r.outcome, "ok", action);
      assert.ok(Date.parse(r.at) > 0, action);
    }
    assert.deepEqual(
      [
        byAction.get("deployment.delete")?.route,
        byAction.get("deployment.delete")?.object_id,
        byAction.get("deployment.delete")?.status,
      ],
      ["/api/v1/deployment/:ws/:id", depId, 204],
    );
    assert.equal(byAction.get("deployment.deploy")?.object_id, "audited-web");
    assert.equal(byAction.get("secret.update")?.object_id, "AUDITED");
    assert.equal(byAction.get("token.revoke")?.object_id, tokenId);
    // Never a secret's value.
    assert.doesNotMatch(JSON.stringify(records), /s3cret-value|other-value/);

    const ops = await trail(opsWs, fz.tokens.admin);
    const revoked = ops.find((r) => r.action === "agent.revoke");
    assert.equal(revoked?.object_id, fz.adminValues.agentId);
    assert.equal(revoked?.token.cluster_admin, true);
    const changed = ops.find((r) => r.action === "limits.update");
    assert.deepEqual([changed?.route, changed?.outcome], ["/api/v1/workspace/:ws/limits", "ok"]);
  });

  test("a workspace opted out of the user namespace and the allow list: the change is in the operator's trail", async () => {
    const ws = fz.f.x.a.externalId;
    const before = (await trail(opsWs, fz.tokens.admin, "?action=limits.update")).length;
    const out = await ask("PUT", `/api/v1/workspace/${ws}/limits`, fz.tokens.admin, {
      user_namespace: false,
      syscall_filter: "denylist",
    });
    assert.equal(out.statusCode, 200, out.body);
    const refused = await ask("PUT", `/api/v1/workspace/${ws}/limits`, admin.secret, {
      user_namespace: false,
    });
    assert.equal(refused.statusCode, 403, "a workspace admin cannot opt its own workspace out");
    const records = await trail(opsWs, fz.tokens.admin, "?action=limits.update");
    assert.equal(records.length, before + 1);
    const r = records[0];
    assert.deepEqual(
      [r?.method, r?.route, r?.object_id, r?.outcome, r?.status, r?.token.cluster_admin],
      ["PUT", "/api/v1/workspace/:ws/limits", ws, "ok", 200, true],
      "the operator's trail names the workspace it opted out",
    );
    const denied = (await trail(ws, admin.secret, "?action=limits.update")).find(
      (x) => x.token.name === "alice",
    );
    assert.deepEqual([denied?.outcome, denied?.status], ["denied", 403]);
    // The values in force are the limits route's to show (the trail records no bodies).
    const now = await ask("GET", `/api/v1/workspace/${ws}/limits`, admin.secret);
    assert.deepEqual(
      [now.json().limits.user_namespace, now.json().limits.syscall_filter],
      [false, "denylist"],
    );
    const back = await ask("PUT", `/api/v1/workspace/${ws}/limits`, fz.tokens.admin, {
      user_namespace: true,
      syscall_filter: "allowlist",
    });
    assert.equal(back.statusCode, 200, back.body);
  });

  test("refused and failed changes are recorded too, with their outcome", async () => {
    const ws = fz.f.x.a.externalId;
    const refused = await ask("POST", `/api/v1/secret/${ws}`, viewer, { name: "NOPE", value: "x" });
    assert.equal(refused.statusCode, 403);
    const missing = await ask("DELETE", `/api/v1/secret/${ws}/NO_SUCH_SECRET`, admin.secret);
    assert.equal(missing.statusCode, 404);
    const records = await trail(ws, admin.secret, "?action=secret.delete");
    assert.ok(records.every((r) => r.action === "secret.delete"));
    const failed = records.find((r) => r.object_id === "NO_SUCH_SECRET");
    assert.deepEqual([failed?.outcome, failed?.status, failed?.error_code], ["failed", 404, "not_found"]);
    const created = await trail(ws, admin.secret, "?action=secret.create");
    const denied = created.find((r) => r.token.name === "victor");
    assert.deepEqual(
      [denied?.outcome, denied?.status, denied?.error_code],
      ["denied", 403, "permission_denied"],
    );
  });

  test("the trail pages newest first, is for admin tokens only, and is the workspace's own", async () => {
    const ws = fz.f.x.a.externalId;
    const all = await trail(ws, admin.secret, "?limit=500");
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const q: string = `?limit=2${cursor ? `&cursor=${cursor}` : ""}`;
      const r = await ask("GET", `/api/v1/audit/${ws}${q}`, admin.secret);
      seen.push(...(r.json().records as AuditJson[]).map((x) => x.id));
      cursor = r.json().next_cursor;
    } while (cursor);
    assert.deepEqual(
      seen,
      all.map((r) => r.id),
    );
    const times = all.map((r) => r.at);
    assert.deepEqual(times, [...times].sort().reverse());
    assert.equal((await ask("GET", `/api/v1/audit/${ws}`, viewer)).statusCode, 403);
    assert.equal((await ask("GET", `/api/v1/audit/${ws}`, fz.tokens.b)).statusCode, 404);
    const mine = await trail(
      fz.f.x.b.externalId,
      (await fz.f.x.h.store.tokens.create(fz.f.x.b.id, { role: "admin" })).secret,
    );
    assert.ok(mine.every((r) => r.token.name !== "alice"));
  });

  test("the store has no path that changes a record: the repository only inserts and reads", async () => {
    const { AuditTrail } = await import("../../coordinator/workspaces/index.ts");
    const methods = Object.getOwnPropertyNames(AuditTrail.prototype).filter((m) => m !== "constructor");
    assert.deepEqual(methods.sort(), ["idle", "list", "record"]);
  });

  test("a webhook subscribed to audit.* receives each change as a signed CloudEvent", async () => {
    const { x } = fz.f;
    const rx = await startReceiver(hooks);
    const { dispatcher, service } = webhookSystem(x.h.store);
    await dispatcher.start(x.events.localFeed);
    hooks.after(() => dispatcher.stop());
    const { signingSecret } = await service.create(x.a.id, {
      url: rx.url("/audit"),
      event_types: ["audit.*"],
    });
    const ws = x.a.externalId;
    const r = await ask("POST", `/api/v1/secret/${ws}`, admin.secret, {
      name: "HOOKED",
      value: "hook-value",
    });
    assert.equal(r.statusCode, 201, r.body);
    await x.audit.idle();
    // Earlier changes' events may arrive too (the stream hands over what it stores): wait for this one.
    const ours = () => rx.got.find((g) => JSON.parse(g.body).subject === "HOOKED");
    for (let n = 1; !ours(); n++) await rx.waitFor(n);
    await dispatcher.idle();
    const got = ours();
    assert.ok(got, "an audit.change delivery");
    assert.equal(got.headers["x-service-event"], "audit.change");
    assert.ok(
      verifies(signingSecret, got.body, got.headers["x-service-signature"]),
      "the signature verifies",
    );
    const ce = JSON.parse(got.body);
    assert.deepEqual(
      [ce.specversion, ce.type, ce.source, ce.subject, ce.data.action, ce.data.token.name, ce.data.outcome],
      ["1.0", "audit.change", `/workspaces/${ws}`, "HOOKED", "secret.create", "alice", "ok"],
    );
    assert.doesNotMatch(got.body, /hook-value/);
  });
});
