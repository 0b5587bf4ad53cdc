// Per-agent NATS identities with real `berth agent` processes: each joins
// with its own nkey user (its seed stays in its identity file), and
// `berth agent revoke` cuts one off while the other keeps reporting; the
// revoked one, restarted, is refused. Joining is once: with the join token
// revoked, a restarted agent resumes with its own identity and a new host
// cannot join.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { freePort, waitFor } from "../../shared/net.ts";
import { bearer } from "../helpers/auth.ts";
import { runCli, spawnAgent, spawnCli, startTestCluster, type TestCluster } from "../helpers/cluster.ts";
import { needs, tempDir } from "../helpers/env.ts";

interface AgentRow {
  id: string;
  hostname: string;
  state: string;
  last_seen_at: string | null;
}

async function byHost(c: TestCluster, hostname: string): Promise<AgentRow | undefined> {
  const r = await fetch(`${c.url}/api/v1/agents`, { headers: bearer(c.adminToken) });
  assert.equal(r.status, 200);
  return ((await r.json()) as { agents: AgentRow[] }).agents.find((a) => a.hostname === hostname);
}

test("real agents get their own NATS users; revoke cuts one off and the other keeps working", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const c = await startTestCluster(t, { heartbeatIntervalMs: 500, perAgentNats: true });
  const one = await spawnAgent(t, c, "host-one");
  const two = await spawnAgent(t, c, "host-two");
  for (const [name, p] of [
    ["host-one", one],
    ["host-two", two],
  ] as const) {
    await waitFor(async () => (await byHost(c, name))?.state === "ready", {
      timeoutMs: 30_000,
      what: `agent ${name} to be ready; its output:\n${p.output()}`,
    });
  }
  const a1 = (await byHost(c, "host-one")) as AgentRow;
  const a2 = (await byHost(c, "host-two")) as AgentRow;

  // The seed stays on the host; the server knows only the public key.
  const identity = JSON.parse(readFileSync(join(one.dataDir, "identity.json"), "utf8")) as {
    nats: { seed?: string; password?: string };
  };
  assert.match(identity.nats.seed ?? "", /^SU[A-Z2-7]+$/);
  assert.equal(identity.nats.password, undefined, "no shared password");
  const users = readFileSync(c.nats.usersFile, "utf8");
  assert.equal(users.match(/nkey: "U[A-Z2-7]{55}"/g)?.length, 2, users);
  assert.doesNotMatch(users, /SU[A-Z2-7]{50}/, "no seed in the server's file");

  const revoked = await runCli(["agent", "revoke", a1.id], { SERVICE_TOKEN: c.adminToken, BERTH_URL: c.url });
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.match(revoked.stdout, new RegExp(`revoked agent ${a1.id}`));
  assert.doesNotMatch(revoked.stdout, /shared agent NATS user/);
  // nats-server dropped its connection at the reload.
  await waitFor(() => one.output().includes("lost NATS"), {
    timeoutMs: 30_000,
    what: `the revoked agent to lose NATS; its output:\n${one.output()}`,
  });
  assert.equal((await byHost(c, "host-one"))?.state, "left");
  assert.equal(readFileSync(c.nats.usersFile, "utf8").match(/nkey: /g)?.length, 1);

  // The other agent keeps reporting: its last-seen time moves past the revoke.
  const cut = Date.now();
  await waitFor(
    async () => {
      const row = await byHost(c, "host-two");
      return row?.state === "ready" && Date.parse(row.last_seen_at ?? "") > cut;
    },
    { timeoutMs: 30_000, what: `agent host-two to keep reporting; its output:\n${two.output()}` },
  );
  assert.equal((await byHost(c, "host-two"))?.id, a2.id);

  // The recommended step after the hosts joined: revoke the join token they used.
  const jts = await fetch(`${c.url}/api/v1/join-token`, { headers: bearer(c.adminToken) });
  for (const jt of ((await jts.json()) as { join_tokens: { id: string; revoked_at: string | null }[] })
    .join_tokens) {
    if (jt.revoked_at) continue;
    const r = await runCli(["agent", "join-token", "revoke", jt.id], {
      SERVICE_TOKEN: c.adminToken,
      BERTH_URL: c.url,
    });
    assert.equal(r.code, 0, r.stderr);
  }

  // Restarted with its identity (and the revoked join token still on its command line, as the unit
  // gives it), the revoked agent is refused and exits.
  await one.stop();
  const again = restartAgent(t, c, "host-one", one.dataDir);
  assert.notEqual(await again.exited, 0);
  assert.match(again.output(), /revoked/);
  assert.equal((await byHost(c, "host-one"))?.state, "left");

  // The other, restarted, resumes with its own identity: ready again under the same id.
  await two.stop();
  const restartedAt = Date.now();
  const twoAgain = restartAgent(t, c, "host-two", two.dataDir, await freePort());
  await waitFor(
    async () => {
      const row = await byHost(c, "host-two");
      return row?.state === "ready" && Date.parse(row.last_seen_at ?? "") > restartedAt;
    },
    {
      timeoutMs: 30_000,
      what: `agent host-two to be ready after its restart; its output:\n${twoAgain.output()}`,
    },
  );
  assert.equal((await byHost(c, "host-two"))?.id, a2.id);
  assert.match(twoAgain.output(), /resumed as/);

  // A new host cannot join with the revoked token.
  const fresh = restartAgent(t, c, "host-three", tempDir(t, "berth-agent-host-three-"));
  assert.notEqual(await fresh.exited, 0);
  assert.match(fresh.output(), /join token is wrong or revoked/);
  assert.equal(await byHost(c, "host-three"), undefined);
});

/**
 * `berth agent` on a data directory, as the systemd unit starts it (with the join token); without
 * a port it is one that is refused before it listens.
 */
function restartAgent(
  t: Parameters<typeof spawnCli>[0],
  c: TestCluster,
  name: string,
  dataDir: string,
  port?: number,
) {
  return spawnCli(t, [
    "agent",
    "--coordinator",
    c.url,
    "--join-token",
    c.joinToken,
    "--data-dir",
    dataDir,
    "--hostname",
    name,
    "--grpc-host",
    "127.0.0.1",
    "--grpc-port",
    String(port ?? 0),
    "--advertise",
    `127.0.0.1:${port ?? 1}`,
    "--no-containers",
  ]);
}
