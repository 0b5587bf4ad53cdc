// Per-agent NATS identities and `berth agent revoke`, against a real
// nats-server (users.conf rewritten and reloaded by the coordinator) and real
// agent gRPC servers over mutual TLS: an agent's nkey user reaches its own
// subjects and the task API, never another agent's; a revoked agent's NATS
// connection is closed and cannot come back, the coordinator stops calling it
// over gRPC and refuses its re-join, and the other agent keeps working.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { AckPolicy, connect, type NatsConnection, nkeyAuthenticator, nkeys, RetentionPolicy } from "nats";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { AgentClientPool } from "../../coordinator/containers/agent-clients.ts";
import { AgentNatsUsers, RevokedAgents } from "../../coordinator/fleet/agent-credentials.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { JoinService } from "../../coordinator/fleet/join.ts";
import { AgentRevoker } from "../../coordinator/fleet/revoke.ts";
import { COORDINATOR_CLIENT_NAME, ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { Store } from "../../coordinator/records.ts";
import { agentInboxPrefix } from "../../shared/agent-nats.ts";
import { BerthError } from "../../shared/errors.ts";
import { closeNats, startNatsServer } from "../../shared/nats-server.ts";
import { freePort } from "../../shared/net.ts";
import { subjects } from "../../shared/subjects.ts";
import {
  ALL_TASK_EVENTS,
  ALL_TASK_SUBJECTS,
  TASK_CANCEL_SUBJECT,
  TASK_EVENTS_STREAM,
  TASKS_STREAM,
  taskEventSubject,
  taskOutputSubject,
  taskSubject,
} from "../../shared/tasks.ts";
import { capacity } from "../containers/fakes.ts";
import { tempDir } from "../helpers/env.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { waitUntil } from "../helpers/wait.ts";
import { FakeAgent } from "../rpc/fake-agent.ts";

const enc = new TextEncoder();

/** The operation ("publish", "subscription") of the next permission error the connection reports for `subject`. */
async function permissionError(nc: NatsConnection, subject: string): Promise<string> {
  for await (const s of nc.status()) {
    // nats.js puts the error's code in data and what was refused beside it.
    const ctx = (s as { permissionContext?: { operation: string; subject: string } }).permissionContext;
    if (s.type === "error" && s.data === "PERMISSIONS_VIOLATION" && ctx?.subject === subject)
      return ctx.operation;
  }
  throw new Error("connection closed without the permission error");
}

test("each agent's own NATS user reaches its subjects only; revoke cuts NATS and gRPC at once", async (t) => {
  const dir = tempDir(t, "berth-agent-creds-");
  const coordinatorUser = { user: "coordinator", password: "coord-pw" };
  const nats = await startNatsServer({ dir, port: await freePort(), users: [coordinatorUser] });
  t.after(() => nats.stop());
  const store = await Store.open(`sqlite:${dir}/berth.db`);
  t.after(() => store.close());

  const coord = await connect({
    servers: nats.url,
    user: coordinatorUser.user,
    pass: coordinatorUser.password,
  });
  t.after(() => closeNats(coord));
  const jsm = await coord.jetstreamManager();
  await jsm.streams.add({
    name: TASKS_STREAM,
    subjects: [ALL_TASK_SUBJECTS],
    retention: RetentionPolicy.Workqueue,
  });
  await jsm.consumers.add(TASKS_STREAM, { durable_name: "stub-1", ack_policy: AckPolicy.Explicit });
  await jsm.streams.add({ name: TASK_EVENTS_STREAM, subjects: [ALL_TASK_EVENTS] });

  const pki = await ClusterPki.load(store.kv);
  const revoked = await new RevokedAgents(store.kv).load();
  const natsUsers = new AgentNatsUsers({
    kv: store.kv,
    usersFile: nats.usersFile,
    pidFile: nats.pidFile,
    staticUsers: [coordinatorUser],
  });
  // users.conf as nats-server started with it: nothing to write, so no reload (a reload makes
  // JetStream answer 503 for a moment, which a starting coordinator met).
  assert.equal(await natsUsers.sync(), false, "an unchanged users.conf is not reloaded");
  const join = new JoinService({
    joinTokens: store.joinTokens,
    agents: store.agents,
    pki,
    // No shared agent user: every agent must bring its own nkey.
    agentNats: { url: nats.url, user: "agent", password: "" },
    natsUsers,
    revoked,
    heartbeatIntervalMs: 1000,
  });
  const { secret: joinToken } = await store.joinTokens.create("test");

  const fleet = new FleetView();
  const pool = await AgentClientPool.create({ fleet, pki, revoked });
  t.after(() => pool.close());
  const revoker = new AgentRevoker({ agents: store.agents, revoked, natsUsers, fleet, clients: pool });

  // Two hosts join, each with an nkey made on the host, and each runs its gRPC server.
  const hosts = [];
  for (const name of ["host-a", "host-b"]) {
    const seed = new TextDecoder().decode(nkeys.createUser().getSeed());
    const nkey = nkeys.fromSeed(enc.encode(seed)).getPublicKey();
    const grant = await join.join({
      joinToken,
      hostname: name,
      version: "t",
      grpcAddress: "127.0.0.1:1",
      natsNkey: nkey,
    });
    assert.deepEqual(grant.nats, { url: nats.url }, "no shared password is handed out");
    const rpc = await startAgentRpcServer({
      impl: new FakeAgent(),
      containers: new FakeContainerApi({ agentId: grant.agentId }),
      tcp: {
        host: "127.0.0.1",
        port: 0,
        tls: grant.tls,
        allowedClientNames: [COORDINATOR_CLIENT_NAME],
      },
    });
    t.after(() => rpc.close());
    fleet.observe(
      {
        agentId: grant.agentId,
        hostname: name,
        version: "t",
        sentAt: 0,
        intervalMs: 1000,
        grpcAddress: `127.0.0.1:${rpc.tcpPort}`,
        capacity: capacity(1, 1),
      },
      Date.now(),
    );
    const nc = await connect({
      servers: nats.url,
      authenticator: nkeyAuthenticator(enc.encode(seed)),
      inboxPrefix: agentInboxPrefix(grant.agentId),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 50,
    });
    t.after(() => closeNats(nc));
    hosts.push({ id: grant.agentId, seed, nc });
  }
  const [a, b] = hosts as [(typeof hosts)[0], (typeof hosts)[0]];
  assert.match(
    readFileSync(nats.usersFile, "utf8"),
    new RegExp(nkeys.fromSeed(enc.encode(a.seed)).getPublicKey()),
  );

  // What an agent does: heartbeats on its own subject, the task cancel broadcast, pulling and acking a task,
  // storing a task event, and a request answered into its own inbox.
  const beats: string[] = [];
  coord.subscribe(subjects.allHeartbeats, { callback: (_e, m) => beats.push(m.subject) });
  const cancels = a.nc.subscribe(TASK_CANCEL_SUBJECT, { max: 1 });
  await a.nc.flush();
  await coord.jetstream().publish(taskSubject("stub-1"), enc.encode("task"));
  coord.publish(TASK_CANCEL_SUBJECT, "cancel");
  a.nc.publish(subjects.heartbeat(a.id), "beat");
  await waitUntil(() => beats.includes(subjects.heartbeat(a.id)), { what: "agent A's heartbeat" });
  for await (const m of cancels) assert.equal(m.string(), "cancel");
  const consumer = await a.nc.jetstream().consumers.get(TASKS_STREAM, "stub-1");
  const msg = await consumer.next({ expires: 5000 });
  assert.equal(msg?.string(), "task");
  assert.equal(await msg?.ackAck(), true);
  const ack = await a.nc.jetstream().publish(taskEventSubject(a.id, "task-1"), enc.encode("{}"));
  assert.equal(ack.stream, TASK_EVENTS_STREAM);
  const responder = coord.subscribe(`berth.agent.${a.id}.state`, {
    callback: (_e, m) => m.respond(enc.encode("ok")),
  });
  await coord.flush();
  assert.equal((await a.nc.request(`berth.agent.${a.id}.state`, enc.encode("q"))).string(), "ok");
  responder.unsubscribe();

  // ...and what it may not: another agent's subjects, or replies meant for others.
  const pubDenied = permissionError(a.nc, subjects.heartbeat(b.id));
  a.nc.publish(subjects.heartbeat(b.id), "forged");
  assert.equal(await pubDenied, "publish");
  const subDenied = permissionError(a.nc, taskOutputSubject(b.id, "*"));
  a.nc.subscribe(taskOutputSubject(b.id, "*"));
  assert.equal(await subDenied, "subscription");
  const inboxDenied = permissionError(a.nc, `${agentInboxPrefix(b.id)}.>`);
  a.nc.subscribe(`${agentInboxPrefix(b.id)}.>`);
  assert.equal(await inboxDenied, "subscription");

  // Both answer over gRPC before the revoke.
  assert.equal((await pool.client(a.id).listContainers()).length, 0);

  const result = await revoker.revoke(a.id);
  assert.equal(result.nats, "removed");
  // nats-server closes the connection of the user that left users.conf; its reconnects are refused.
  await a.nc.closed();
  await assert.rejects(
    connect({
      servers: nats.url,
      authenticator: nkeyAuthenticator(enc.encode(a.seed)),
      maxReconnectAttempts: 0,
    }),
    /Authorization Violation/i,
  );
  assert.throws(
    () => pool.client(a.id),
    (e: unknown) => e instanceof BerthError && e.code === "failed_precondition",
  );
  assert.equal(fleet.get(a.id)?.state, "left");
  await assert.rejects(
    join.join({ joinToken, agentId: a.id, hostname: "host-a", version: "t", grpcAddress: "127.0.0.1:1" }),
    (e: unknown) => e instanceof BerthError && e.code === "permission_denied",
  );
  assert.equal((await store.agents.get(a.id))?.state, "left");
  // A coordinator started later reads the revocation from the store.
  assert.equal((await new RevokedAgents(store.kv).load()).has(a.id), true);

  // The other agent is untouched: NATS and gRPC.
  b.nc.publish(subjects.heartbeat(b.id), "beat");
  await waitUntil(() => beats.includes(subjects.heartbeat(b.id)), { what: "agent B's heartbeat" });
  assert.deepEqual(
    beats,
    [subjects.heartbeat(a.id), subjects.heartbeat(b.id)],
    "A's forged heartbeat never arrived",
  );
  assert.equal(b.nc.isClosed(), false);
  assert.equal((await pool.client(b.id).listContainers()).length, 0);
});

test("a revoke on one coordinator reaches the others: their pools refuse the agent and their fleet drops it", async (t) => {
  const dir = tempDir(t, "berth-agent-revoke-bcast-");
  const coordinatorUser = { user: "coordinator", password: "coord-pw" };
  const nats = await startNatsServer({ dir, port: await freePort(), users: [coordinatorUser] });
  t.after(() => nats.stop());
  const store = await Store.open(`sqlite:${dir}/berth.db`);
  t.after(() => store.close());
  const pki = await ClusterPki.load(store.kv);
  const agent = await store.agents.upsertJoin({
    id: "agent-bcast1",
    hostname: "h",
    version: "t",
    grpcAddress: "127.0.0.1:1",
  });

  // Two coordinators: each its own NATS connection, revoked set, fleet view and gRPC pool over one store.
  const coordinators = [];
  for (let i = 0; i < 2; i++) {
    const nc = await connect({
      servers: nats.url,
      user: coordinatorUser.user,
      pass: coordinatorUser.password,
    });
    t.after(() => closeNats(nc));
    const revoked = await new RevokedAgents(store.kv).load();
    const fleet = new FleetView();
    fleet.observe(
      {
        agentId: agent.id,
        hostname: "h",
        version: "t",
        sentAt: 0,
        intervalMs: 1000,
        grpcAddress: "127.0.0.1:1",
        capacity: capacity(1, 1),
      },
      Date.now(),
    );
    const pool = await AgentClientPool.create({ fleet, pki, revoked });
    t.after(() => pool.close());
    const revoker = new AgentRevoker({ agents: store.agents, revoked, fleet, clients: pool, nc });
    revoker.start();
    t.after(() => revoker.stop());
    await nc.flush();
    coordinators.push({ revoked, fleet, pool, revoker });
  }
  const [first, second] = coordinators as [(typeof coordinators)[0], (typeof coordinators)[0]];
  assert.ok(second.pool.client(agent.id), "dialable before");

  await first.revoker.revoke(agent.id);
  await waitUntil(() => second.revoked.has(agent.id), {
    what: "the second coordinator to hear of the revoke",
  });
  assert.throws(
    () => second.pool.client(agent.id),
    (e: unknown) => e instanceof BerthError && e.code === "failed_precondition",
  );
  assert.equal(second.fleet.get(agent.id)?.state, "left");
});
