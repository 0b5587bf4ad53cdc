import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { bareHttpApp } from "../helpers/bare-app.ts";
import { Store } from "../../coordinator/records.ts";
import { tempDir } from "../helpers/env.ts";
import { storeJoinService } from "../helpers/join.ts";
import { bearer } from "../helpers/auth.ts";

describe("coordinator HTTP API (inject)", () => {
  let app: FastifyInstance;
  let store: Store;
  let fleet: FleetView;
  let admin: string;
  let user: string;
  let other: string;
  let joinToken: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    store = await Store.open(`sqlite:${tempDir({ after: (fn) => cleanups.push(fn) })}/b.db`);
    fleet = new FleetView();
    const join = await storeJoinService(store);
    app = await bareHttpApp({ store, fleet, join });
    const ws = await store.workspaces.create("main");
    admin = (await store.tokens.create(ws.id, { admin: true })).secret;
    user = (await store.tokens.create(ws.id, { name: "user" })).secret;
    const ws2 = await store.workspaces.create("elsewhere");
    other = (await store.tokens.create(ws2.id)).secret;
    joinToken = (await store.joinTokens.create("t")).secret;
  });
  after(async () => {
    await app?.close();
    await store?.close();
    for (const fn of cleanups) await fn();
  });

  test("healthz is public", async () => {
    const r = await app.inject({ method: "GET", url: "/healthz" });
    assert.equal(r.statusCode, 200);
    assert.deepEqual(r.json(), { ok: true, version: "test" });
  });

  test("missing, malformed, unknown tokens get 401 with a JSON error", async () => {
    for (const headers of [
      {},
      { authorization: "Bearer" },
      { authorization: "Basic a b" },
      bearer("bt_unknown"),
    ]) {
      const r = await app.inject({ method: "GET", url: "/api/v1/workspace/current", headers });
      assert.equal(r.statusCode, 401, JSON.stringify(headers));
      assert.equal(r.json().error.code, "unauthenticated");
      assert.ok(r.json().error.message.length > 5);
    }
  });

  test("workspace/current answers with the token's workspace; bare token form is accepted", async () => {
    const r = await app.inject({ method: "GET", url: "/api/v1/workspace/current", headers: bearer(user) });
    assert.equal(r.statusCode, 200);
    assert.equal(r.json().name, "main");
    assert.match(r.json().external_id, /^ws-/);
    const bare = await app.inject({
      method: "GET",
      url: "/api/v1/workspace/current",
      headers: { authorization: user },
    });
    assert.equal(bare.json().external_id, r.json().external_id);
    const o = await app.inject({ method: "GET", url: "/api/v1/workspace/current", headers: bearer(other) });
    assert.equal(o.json().name, "elsewhere");
  });

  test("unknown route: 404 JSON; body that is not JSON: 400 invalid_json", async () => {
    const r = await app.inject({ method: "GET", url: "/api/v1/nope", headers: bearer(user) });
    assert.equal(r.statusCode, 404);
    assert.equal(r.json().error.code, "route_not_found");
    const b = await app.inject({
      method: "POST",
      url: "/api/v1/token",
      headers: { ...bearer(user), "content-type": "application/json" },
      payload: "{not json",
    });
    assert.equal(b.statusCode, 400);
    assert.equal(b.json().error.code, "invalid_json");
    assert.ok(!b.body.includes("    at "), "no stack trace");
  });

  test("schema violations are 400 invalid_request naming the problem", async () => {
    const r = await app.inject({
      method: "POST",
      url: "/api/v1/token",
      headers: bearer(user),
      payload: { nope: 1 },
    });
    assert.equal(r.statusCode, 400);
    assert.equal(r.json().error.code, "invalid_request");
    assert.match(r.json().error.message, /nope|additional/);
  });

  test("tokens: create shows the secret once, list hides it, revoke works, scoped to the workspace", async () => {
    const c = await app.inject({
      method: "POST",
      url: "/api/v1/token",
      headers: bearer(user),
      payload: { name: "ci" },
    });
    assert.equal(c.statusCode, 201);
    const { token, token_info } = c.json();
    assert.match(token, /^bt_/);
    const l = await app.inject({ method: "GET", url: "/api/v1/token", headers: bearer(user) });
    assert.ok(!l.body.includes(token));
    assert.ok(l.json().tokens.some((t: { id: string }) => t.id === token_info.id));
    const seenByOther = await app.inject({ method: "GET", url: "/api/v1/token", headers: bearer(other) });
    assert.ok(!seenByOther.json().tokens.some((t: { id: string }) => t.id === token_info.id));
    const crossRevoke = await app.inject({
      method: "DELETE",
      url: `/api/v1/token/${token_info.id}`,
      headers: bearer(other),
    });
    assert.equal(crossRevoke.statusCode, 404);
    const works = await app.inject({
      method: "GET",
      url: "/api/v1/workspace/current",
      headers: bearer(token),
    });
    assert.equal(works.statusCode, 200);
    const rv = await app.inject({
      method: "DELETE",
      url: `/api/v1/token/${token_info.id}`,
      headers: bearer(user),
    });
    assert.equal(rv.statusCode, 200);
    assert.ok(rv.json().token_info.revoked_at);
    const after = await app.inject({
      method: "GET",
      url: "/api/v1/workspace/current",
      headers: bearer(token),
    });
    assert.equal(after.statusCode, 401);
  });

  test("a non-admin token cannot revoke an admin token nor read its secret; an admin token can", async () => {
    const made = await app.inject({
      method: "POST",
      url: "/api/v1/token",
      headers: bearer(admin),
      payload: { name: "ops", admin: true },
    });
    assert.equal(made.statusCode, 201);
    const { token: opsSecret, token_info: ops } = made.json();
    const listed = await app.inject({ method: "GET", url: "/api/v1/token", headers: bearer(user) });
    assert.equal(listed.statusCode, 200);
    assert.ok(!listed.body.includes(opsSecret), "a token list never carries a secret");
    const denied = await app.inject({
      method: "DELETE",
      url: `/api/v1/token/${ops.id}`,
      headers: bearer(user),
    });
    assert.equal(denied.statusCode, 403);
    assert.equal(denied.json().error.code, "permission_denied");
    assert.match(denied.json().error.message, /admin token/);
    const stillAdmin = await app.inject({
      method: "GET",
      url: "/api/v1/workspace",
      headers: bearer(opsSecret),
    });
    assert.equal(stillAdmin.statusCode, 200, "the admin token still works after the refused revoke");
    const allowed = await app.inject({
      method: "DELETE",
      url: `/api/v1/token/${ops.id}`,
      headers: bearer(admin),
    });
    assert.equal(allowed.statusCode, 200);
    assert.ok(allowed.json().token_info.revoked_at);
    const gone = await app.inject({ method: "GET", url: "/api/v1/workspace", headers: bearer(opsSecret) });
    assert.equal(gone.statusCode, 401);
  });

  test("only admin tokens create workspaces, admin tokens, list agents and join tokens", async () => {
    for (const [method, url, payload] of [
      ["POST", "/api/v1/workspace", { name: "x" }],
      ["GET", "/api/v1/workspace", undefined],
      ["POST", "/api/v1/token", { admin: true }],
      ["GET", "/api/v1/agents", undefined],
      ["POST", "/api/v1/join-token", {}],
    ] as const) {
      const r = await app.inject({ method, url, headers: bearer(user), ...(payload ? { payload } : {}) });
      assert.equal(r.statusCode, 403, `${method} ${url}`);
      assert.equal(r.json().error.code, "permission_denied");
    }
    const c = await app.inject({
      method: "POST",
      url: "/api/v1/workspace",
      headers: bearer(admin),
      payload: { name: "team-b" },
    });
    assert.equal(c.statusCode, 201);
    assert.match(c.json().token, /^bt_/);
    const cur = await app.inject({
      method: "GET",
      url: "/api/v1/workspace/current",
      headers: bearer(c.json().token),
    });
    assert.equal(cur.json().name, "team-b");
    const dup = await app.inject({
      method: "POST",
      url: "/api/v1/workspace",
      headers: bearer(admin),
      payload: { name: "team-b" },
    });
    assert.equal(dup.statusCode, 409);
  });

  test("join: wrong token is 401; a good one hands out id, NATS credentials and TLS; rejoin keeps the id", async () => {
    const body = { hostname: "gpu-7", version: "0.1.0", grpc_address: "10.1.2.3:8421" };
    const bad = await app.inject({
      method: "POST",
      url: "/api/v1/agents/join",
      payload: { ...body, join_token: "bj_x" },
    });
    assert.equal(bad.statusCode, 401);
    assert.equal(bad.json().error.code, "join_token_invalid");
    const ok = await app.inject({
      method: "POST",
      url: "/api/v1/agents/join",
      payload: { ...body, join_token: joinToken },
    });
    assert.equal(ok.statusCode, 200);
    const g = ok.json();
    assert.match(g.agent_id, /^agent-/);
    assert.deepEqual(g.nats, { url: "nats://127.0.0.1:4222", user: "agent", password: "pw" });
    assert.match(g.tls.cert_pem, /BEGIN CERTIFICATE/);
    assert.match(g.tls.ca_pem, /BEGIN CERTIFICATE/);
    const { X509Certificate } = await import("node:crypto");
    const cert = new X509Certificate(g.tls.cert_pem);
    assert.ok(cert.checkIssued(new X509Certificate(g.tls.ca_pem)));
    assert.match(cert.subjectAltName ?? "", /10\.1\.2\.3/);
    const again = await app.inject({
      method: "POST",
      url: "/api/v1/agents/join",
      payload: { ...body, join_token: joinToken, agent_id: g.agent_id },
    });
    assert.equal(again.json().agent_id, g.agent_id);
    const badAddr = await app.inject({
      method: "POST",
      url: "/api/v1/agents/join",
      payload: { ...body, grpc_address: "nope", join_token: joinToken },
    });
    assert.equal(badAddr.statusCode, 400);
  });

  test("agents list merges the live view: ready while heartbeats come, lost after", async () => {
    const { agent_id } = (
      await app.inject({
        method: "POST",
        url: "/api/v1/agents/join",
        payload: { hostname: "h", version: "v", grpc_address: "127.0.0.1:1", join_token: joinToken },
      })
    ).json();
    const now = Date.now();
    fleet.observe(
      {
        agentId: agent_id,
        hostname: "h",
        version: "v",
        sentAt: now,
        intervalMs: 1000,
        grpcAddress: "127.0.0.1:1",
        capacity: {
          cpuCores: 8,
          memoryBytes: 2 ** 34,
          disk: { path: "/", totalBytes: 100, freeBytes: 50 },
          gpus: {
            available: true,
            toolkit: false,
            devices: [
              { index: 0, uuid: "GPU-1", model: "NVIDIA H100 80GB HBM3", type: "H100", memoryMiB: 81559 },
            ],
          },
        },
      },
      now,
    );
    const r = await app.inject({ method: "GET", url: "/api/v1/agents", headers: bearer(admin) });
    const a = r.json().agents.find((x: { id: string }) => x.id === agent_id);
    assert.equal(a.state, "ready");
    assert.equal(a.capacity.cpu_cores, 8);
    assert.deepEqual(a.capacity.gpus.counts, { H100: 1 });
    fleet.sweep(now + 60_000);
    const r2 = await app.inject({ method: "GET", url: `/api/v1/agents/${agent_id}`, headers: bearer(admin) });
    assert.equal(r2.json().state, "lost");
    const missing = await app.inject({
      method: "GET",
      url: "/api/v1/agents/agent-nope",
      headers: bearer(admin),
    });
    assert.equal(missing.statusCode, 404);
  });
});
