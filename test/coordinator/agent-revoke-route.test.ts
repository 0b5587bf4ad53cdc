// `berth agent revoke` and its admin route (POST /api/v1/agents/{id}/revoke):
// who may call it, what it answers, and the real CLI against a listening
// coordinator app. The NATS and gRPC cut itself: agent-credentials.test.ts.

import assert from "node:assert/strict";
import { test } from "node:test";
import { RevokedAgents } from "../../coordinator/fleet/agent-credentials.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { JoinService } from "../../coordinator/fleet/join.ts";
import { AgentRevoker } from "../../coordinator/fleet/revoke.ts";
import { bareHttpApp } from "../helpers/bare-app.ts";
import { ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { Store } from "../../coordinator/records.ts";
import { bearer } from "../helpers/auth.ts";
import { runCli } from "../helpers/cluster.ts";
import { tempDir } from "../helpers/env.ts";

test("POST /api/v1/agents/{id}/revoke and `berth agent revoke`: admin only, unknown agent 404, the agent ends revoked", async (t) => {
  const dir = tempDir(t, "berth-agent-revoke-");
  const store = await Store.open(`sqlite:${dir}/berth.db`);
  t.after(() => store.close());
  const pki = await ClusterPki.load(store.kv);
  const revoked = await new RevokedAgents(store.kv).load();
  const fleet = new FleetView();
  const join = new JoinService({
    joinTokens: store.joinTokens,
    agents: store.agents,
    pki,
    agentNats: { url: "nats://127.0.0.1:1", user: "agent", password: "shared" },
    revoked,
    heartbeatIntervalMs: 1000,
  });
  const revoker = new AgentRevoker({ agents: store.agents, revoked, fleet, clients: {} });
  const app = await bareHttpApp({ store, fleet, join, revoker });
  t.after(() => app.close());
  const ws = await store.workspaces.create("main");
  const admin = (await store.tokens.create(ws.id, { admin: true })).secret;
  const user = (await store.tokens.create(ws.id, { name: "user" })).secret;
  const { secret: joinToken } = await store.joinTokens.create("t");
  // An agent without a key (an older version) gets the shared user: revoke says its NATS is not cut.
  const grant = await join.join({
    joinToken,
    hostname: "old-host",
    version: "t",
    grpcAddress: "127.0.0.1:1",
  });
  assert.equal(grant.nats.password, "shared");
  await store.agents.recordSeen(grant.agentId, { state: "ready", lastSeenAt: new Date().toISOString() });

  const url = `/api/v1/agents/${grant.agentId}/revoke`;
  assert.equal((await app.inject({ method: "POST", url })).statusCode, 401);
  assert.equal((await app.inject({ method: "POST", url, headers: bearer(user) })).statusCode, 403);
  const missing = await app.inject({
    method: "POST",
    url: "/api/v1/agents/agent-nosuch/revoke",
    headers: bearer(admin),
  });
  assert.equal(missing.statusCode, 404);
  assert.equal(missing.json().error.code, "not_found");
  assert.equal(revoked.has(grant.agentId), false, "refused calls revoke nothing");

  const address = await app.listen({ host: "127.0.0.1", port: 0 });
  const r = await runCli(["agent", "revoke", grant.agentId], {
    BERTH_CONFIG: `${dir}/cli.json`,
    BERTH_URL: address,
    SERVICE_TOKEN: admin,
  });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`revoked agent ${grant.agentId} at `));
  assert.match(r.stdout, /shared agent NATS user/);
  assert.equal(revoked.has(grant.agentId), true);
  assert.equal((await store.agents.get(grant.agentId))?.state, "left");
  // Again: the same time, still revoked.
  const again = await app.inject({ method: "POST", url, headers: bearer(admin) });
  assert.equal(again.statusCode, 200);
  assert.equal(again.json().nats, "shared_user");
});
