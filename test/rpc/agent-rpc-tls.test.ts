import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import type { AgentApi } from "../../api/index.ts";
import { AgentRpcClient, type AgentRpcClientTlsOptions } from "../../api/grpc/index.ts";
import { fromGrpcError } from "../../api/grpc/index.ts";
import { loadAgentProto } from "../../api/grpc/index.ts";
import { type AgentRpcServer, startAgentRpcServer } from "../../agent/rpc/server.ts";
import { type PemCertificate, createClusterCa, issueCertificate } from "../../coordinator/pki/ca.ts";
import { ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { BerthError } from "../../shared/errors.ts";
import { freePort } from "../../shared/net.ts";
import { FakeAgent, sampleCapacity } from "./fake-agent.ts";
import { memoryStore } from "../helpers/store.ts";

const AGENT_ID = "agent-tls1";

const isBerth = (code: string, message?: RegExp) => (e: unknown) =>
  e instanceof BerthError && e.code === code && (!message || message.test(e.message));

describe("agent gRPC over TCP with mutual TLS", () => {
  let pki: ClusterPki;
  let agentCert: PemCertificate;
  let coordinatorCert: PemCertificate;
  let foreignClientCert: PemCertificate;
  const impl = new FakeAgent();
  let server: AgentRpcServer;
  let address: string;
  const clients: AgentRpcClient[] = [];

  const connect = (tls: Partial<AgentRpcClientTlsOptions>, at = address, deadlineMs?: number) => {
    const c = new AgentRpcClient({
      address: at,
      tls: { caPem: pki.caPem, ...coordinatorCert, ...tls },
      deadlineMs,
    });
    clients.push(c);
    return c;
  };

  before(async () => {
    pki = await ClusterPki.load(memoryStore());
    agentCert = await pki.issueAgentCert(AGENT_ID, { ipAddresses: ["127.0.0.1"] });
    coordinatorCert = await pki.issueCoordinatorClientCert();
    const foreignCa = await createClusterCa({ commonName: "someone else's CA" });
    foreignClientCert = await issueCertificate(foreignCa, {
      commonName: "berth-coordinator",
      usage: "client",
    });
    server = await startAgentRpcServer({
      impl,
      tcp: { host: "127.0.0.1", port: 0, tls: { caPem: pki.caPem, ...agentCert } },
    });
    address = `127.0.0.1:${server.tcpPort}`;
  });

  after(async () => {
    for (const c of clients) c.close();
    await server?.close();
  });

  test("health and capacity round-trip, verifying the agent by IP", async () => {
    const c = connect({});
    assert.deepEqual(await c.health(), impl.healthReply);
    assert.deepEqual(await c.capacity(), sampleCapacity);
  });

  test("the agent can be verified by agent id when dialled by a name not in its certificate", async () => {
    const c = connect({ serverNameOverride: AGENT_ID }, `localhost:${server.tcpPort}`);
    assert.equal((await c.health()).agentId, "agent-test1");
  });

  test("a server certificate for another name is refused", async () => {
    const before = impl.calls;
    await assert.rejects(
      connect({ serverNameOverride: "agent-someoneelse" }).health(),
      isBerth("unavailable"),
    );
    assert.equal(impl.calls, before, "the call must not reach the agent");
  });

  test("a client without a certificate is rejected", async () => {
    const { Client } = loadAgentProto();
    const raw = new Client(address, grpc.credentials.createSsl(Buffer.from(pki.caPem)));
    const before = impl.calls;
    try {
      const err = await new Promise<unknown>((resolve) => {
        const method = (raw as unknown as Record<string, (...a: unknown[]) => void>).Health!;
        method.call(raw, {}, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (e: unknown) =>
          resolve(e),
        );
      });
      assert.ok(err, "the call must fail");
      assert.ok(isBerth("unavailable")(fromGrpcError(err, { address, deadlineMs: 10_000 })));
    } finally {
      raw.close();
    }
    assert.equal(impl.calls, before, "the call must not reach the agent");
  });

  test("a client certificate from a different CA is rejected", async () => {
    const before = impl.calls;
    await assert.rejects(connect(foreignClientCert).health(), isBerth("unavailable", /unreachable/));
    assert.equal(impl.calls, before, "the call must not reach the agent");
  });

  test("a BerthError thrown by the agent arrives with its code, message and details", async () => {
    impl.failWith = new BerthError("not_found", "container ctr-123 not found", { containerId: "ctr-123" });
    try {
      const e = await connect({})
        .capacity()
        .catch((err: unknown) => err);
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "not_found");
      assert.equal(e.kind, "NotFound");
      assert.equal(e.message, "container ctr-123 not found");
      assert.deepEqual(e.details, { containerId: "ctr-123" });

      impl.failWith = new BerthError("unavailable", "runc is not installed");
      await assert.rejects(connect({}).health(), isBerth("unavailable", /^runc is not installed$/));

      impl.failWith = new TypeError("boom");
      await assert.rejects(connect({}).health(), isBerth("internal", /internal error in the agent: boom/));
    } finally {
      impl.failWith = undefined;
    }
  });

  test("a capacity the wire cannot carry is refused, not mangled", async () => {
    impl.capacityReply = { ...sampleCapacity, memoryBytes: -1 };
    try {
      await assert.rejects(
        connect({}).capacity(),
        isBerth("internal", /memoryBytes must be a non-negative integer/),
      );
    } finally {
      impl.capacityReply = sampleCapacity;
    }
  });

  test("a call past its deadline is an unavailable error saying so", async () => {
    let release = () => {};
    impl.hold = new Promise((r) => {
      release = r;
    });
    try {
      await assert.rejects(
        connect({}, address, 300).health(),
        isBerth("unavailable", /did not answer within 300 ms/),
      );
    } finally {
      release();
      impl.hold = undefined;
    }
  });
});

test("only the allowed client names may call when the agent restricts them", async (t) => {
  const pki = await ClusterPki.load(memoryStore());
  const agentCert = await pki.issueAgentCert(AGENT_ID, { ipAddresses: ["127.0.0.1"] });
  const coordinatorCert = await pki.issueCoordinatorClientCert();
  const impl: AgentApi = new FakeAgent();
  const server = await startAgentRpcServer({
    impl,
    tcp: {
      host: "127.0.0.1",
      port: 0,
      tls: { caPem: pki.caPem, ...agentCert },
      allowedClientNames: ["berth-coordinator"],
    },
  });
  t.after(() => server.close());
  const address = `127.0.0.1:${server.tcpPort}`;
  const asCoordinator = new AgentRpcClient({ address, tls: { caPem: pki.caPem, ...coordinatorCert } });
  const asAgent = new AgentRpcClient({ address, tls: { caPem: pki.caPem, ...agentCert } });
  t.after(() => {
    asCoordinator.close();
    asAgent.close();
  });
  assert.equal((await asCoordinator.health()).status, "SERVING");
  await assert.rejects(
    asAgent.health(),
    isBerth("permission_denied", new RegExp(`${AGENT_ID} may not call`)),
  );
});

test("a dead port is an unavailable error naming the agent", async (t) => {
  const pki = await ClusterPki.load(memoryStore());
  const cert = await pki.issueCoordinatorClientCert();
  const port = await freePort();
  const c = new AgentRpcClient({
    address: `127.0.0.1:${port}`,
    tls: { caPem: pki.caPem, ...cert },
    deadlineMs: 5000,
  });
  t.after(() => c.close());
  await assert.rejects(
    c.health(),
    isBerth("unavailable", new RegExp(`^agent at 127\\.0\\.0\\.1:${port} is unreachable: .*ECONNREFUSED`)),
  );
});
