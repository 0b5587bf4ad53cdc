// Joining is once: an agent that joined resumes at each start with the
// certificate it was issued (POST /api/v1/agents/resume, signed by its key),
// so revoking the join token stops new joins only; a revoked agent, a forged
// or stale proof, and another cluster's certificate are refused. The real
// agent processes: test/e2e/agent-revoke.test.ts.

import assert from "node:assert/strict";
import { X509Certificate, generateKeyPairSync } from "node:crypto";
import { test } from "node:test";
import { resumeOnce, joinOnce } from "../../agent/fleet/join-client.ts";
import type { AgentIdentity } from "../../agent/fleet/identity.ts";
import { RevokedAgents } from "../../coordinator/fleet/agent-credentials.ts";
import { JoinService } from "../../coordinator/fleet/join.ts";
import { joinRoutes } from "../../coordinator/fleet/routes.ts";
import { createFastify } from "../../coordinator/http/index.ts";
import { createClusterCa, issueCertificate } from "../../coordinator/pki/ca.ts";
import { ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { Store } from "../../coordinator/records.ts";
import { signResume } from "../../shared/agent-resume.ts";
import { tempDir } from "../helpers/env.ts";

const here = { hostname: "gpu-1", version: "t", grpcAddress: "127.0.0.1:8421" };

async function setUp(t: import("node:test").TestContext) {
  const dir = tempDir(t, "berth-agent-resume-");
  const store = await Store.open(`sqlite:${dir}/berth.db`);
  t.after(() => store.close());
  const revoked = await new RevokedAgents(store.kv).load();
  const join = new JoinService({
    joinTokens: store.joinTokens,
    agents: store.agents,
    pki: await ClusterPki.load(store.kv),
    agentNats: { url: "nats://127.0.0.1:1", user: "agent", password: "shared" },
    revoked,
    heartbeatIntervalMs: 1000,
  });
  const app = createFastify();
  await app.register(joinRoutes(join));
  await app.listen({ host: "127.0.0.1", port: 0 });
  t.after(() => app.close());
  const addr = app.server.address() as { port: number };
  return { store, revoked, join, coordinator: `http://127.0.0.1:${addr.port}` };
}

test("after a join the agent resumes with its own certificate, also once the join token is revoked", async (t) => {
  const { store, coordinator } = await setUp(t);
  const { record, secret } = await store.joinTokens.create("rack 1");
  const joined = await joinOnce({ coordinator, joinToken: secret, ...here });
  await store.joinTokens.revoke(record.id);
  await assert.rejects(joinOnce({ coordinator, joinToken: secret, ...here, hostname: "gpu-2" }), {
    code: "join_token_invalid",
  });

  const resumed = await resumeOnce(joined, { ...here, grpcAddress: "10.0.0.7:8421", version: "t2" });
  assert.equal(resumed.agentId, joined.agentId);
  assert.equal(resumed.nats.seed, joined.nats.seed, "its own NATS identity stays");
  assert.equal(resumed.tls.keyPem, joined.tls.keyPem, "a certificate far from expiry is kept");
  const rec = await store.agents.get(joined.agentId);
  assert.equal(rec?.grpcAddress, "10.0.0.7:8421", "the resume records where the agent is now");
  assert.equal(rec?.version, "t2");
});

test("a revoked agent, a forged signature, a stale one and another CA's certificate are refused", async (t) => {
  const { store, revoked, coordinator } = await setUp(t);
  const { secret } = await store.joinTokens.create("");
  const joined = await joinOnce({ coordinator, joinToken: secret, ...here });

  // Signed by a key that is not the certificate's.
  const other = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const forgedKey = other.privateKey.export({ type: "pkcs8", format: "pem" }).toString();
  await assert.rejects(
    resumeOnce({ ...joined, tls: { ...joined.tls, keyPem: forgedKey } }, here),
    (e: Error) => {
      assert.equal((e as { code?: string }).code, "unauthenticated");
      assert.match(e.message, /signature does not match/);
      return true;
    },
  );

  // A certificate for the same agent id from a CA this cluster does not trust.
  const foreignCa = await createClusterCa();
  const foreign = await issueCertificate(foreignCa, { commonName: joined.agentId, usage: "both" });
  await assert.rejects(
    resumeOnce({ ...joined, tls: { ...joined.tls, ...foreign } }, here),
    /not from this cluster's CA/,
  );

  // Another agent's certificate cannot speak for this one.
  const second = await joinOnce({ coordinator, joinToken: secret, ...here, hostname: "gpu-2" });
  await assert.rejects(resumeOnce({ ...joined, tls: second.tls }, here), /not agent .*'s/);

  // A request signed long ago (a captured one, replayed) is refused.
  const signedAt = new Date(Date.now() - 3_600_000).toISOString();
  const fields = { agentId: joined.agentId, ...here, signedAt };
  const stale = await fetch(`${coordinator}/api/v1/agents/resume`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      agent_id: joined.agentId,
      hostname: here.hostname,
      version: here.version,
      grpc_address: here.grpcAddress,
      signed_at: signedAt,
      cert_pem: joined.tls.certPem,
      signature: signResume(fields, joined.tls.keyPem),
    }),
  });
  assert.equal(stale.status, 401);
  assert.match(((await stale.json()) as { error: { message: string } }).error.message, /signing time/);

  await revoked.revoke(joined.agentId);
  await assert.rejects(resumeOnce(joined, here), (e: Error) => {
    assert.equal((e as { code?: string }).code, "permission_denied");
    assert.match(e.message, /revoked/);
    return true;
  });
});

test("a coordinator that does not know the agent refuses it; a certificate near expiry is renewed with a key made on the host", async (t) => {
  const { store, coordinator } = await setUp(t);
  const { secret } = await store.joinTokens.create("");
  const joined = await joinOnce({ coordinator, joinToken: secret, ...here });

  // A coordinator that lost its database (and so its CA) does not know the agent: unauthenticated,
  // which the agent answers with a join when it has a join token (agent/main.ts).
  const elsewhere = await setUp(t);
  await assert.rejects(resumeOnce({ ...joined, coordinator: elsewhere.coordinator }, here), {
    code: "unauthenticated",
  });

  // A certificate 10 days from expiry, from this cluster's CA.
  const pki = await ClusterPki.load(store.kv);
  const short = await pki.issueAgentCert(joined.agentId, { days: 10 });
  const nearExpiry: AgentIdentity = { ...joined, tls: { ...joined.tls, ...short } };
  const renewed = await resumeOnce(nearExpiry, here);
  assert.notEqual(renewed.tls.keyPem, short.keyPem, "a new key, made by the agent");
  const cert = new X509Certificate(renewed.tls.certPem);
  assert.ok(Date.parse(cert.validTo) - Date.now() > 300 * 86_400_000, "a fresh certificate");
  assert.ok(cert.checkIssued(new X509Certificate(pki.caPem)));
  assert.match(cert.subject, new RegExp(`CN=${joined.agentId}`));
  // The new certificate and key belong together: the next resume proves itself with them.
  assert.equal((await resumeOnce(renewed, here)).agentId, joined.agentId);
});
