import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { freePort, waitFor } from "../../shared/net.ts";
import { startNatsServer } from "../../shared/nats-server.ts";
import { clusterNatsUsers } from "../../shared/subjects.ts";
import { runCli, spawnAgent, startTestCluster, type TestCluster } from "../helpers/cluster.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { bearer } from "../helpers/auth.ts";

interface AgentRow {
  id: string;
  hostname: string;
  state: string;
  last_seen_at: string | null;
  capacity: {
    cpu_cores: number;
    memory_bytes: number;
    disk: { free_bytes: number };
    gpus: { available: boolean; reason?: string };
  };
}

async function agents(c: TestCluster): Promise<AgentRow[]> {
  const r = await fetch(`${c.url}/api/v1/agents`, { headers: bearer(c.adminToken) });
  assert.equal(r.status, 200);
  return ((await r.json()) as { agents: AgentRow[] }).agents;
}

const byHost = async (c: TestCluster, host: string) => (await agents(c)).find((a) => a.hostname === host);

describe("fleet over a real nats-server", () => {
  test("agents join, report real capacity, go lost when killed, left when stopped, and survive a NATS restart", async (t) => {
    if (!needs(t, { commands: ["nats-server"] })) return;
    const c = await startTestCluster(t, { heartbeatIntervalMs: 1000 });

    const one = await spawnAgent(t, c, "host-one");
    const a1 = await waitFor(
      async () => (await byHost(c, "host-one"))?.state === "ready" && byHost(c, "host-one"),
      {
        timeoutMs: 30_000,
        what: `agent host-one to be ready; its output:\n${one.output()}`,
      },
    );
    assert.ok(a1);
    assert.equal(a1.capacity.cpu_cores, cpus().length);
    assert.equal(a1.capacity.memory_bytes, totalmem());
    assert.ok(a1.capacity.disk.free_bytes > 0);
    assert.equal(a1.capacity.gpus.available, false);
    assert.match(a1.capacity.gpus.reason ?? "", /nvidia-smi/);

    const list = await runCli(["agent", "list"], { SERVICE_TOKEN: c.adminToken, BERTH_URL: c.url });
    assert.equal(list.code, 0, list.stderr);
    // The columns: ID, HOSTNAME, POOL, STATE, CPUS, ...
    assert.match(list.stdout, new RegExp(`${a1.id}\\s+host-one\\s+default\\s+READY\\s+${cpus().length}\\s`));

    // A second host, killed without a word, is lost within 30 s.
    const two = await spawnAgent(t, c, "host-two");
    await waitFor(async () => (await byHost(c, "host-two"))?.state === "ready", {
      timeoutMs: 30_000,
      what: "agent host-two to be ready",
    });
    two.child.kill("SIGKILL");
    await two.exited;
    await waitFor(async () => (await byHost(c, "host-two"))?.state === "lost", {
      timeoutMs: 30_000,
      what: "agent host-two to be marked lost",
    });

    // NATS goes away and comes back on the same port: the agent reconnects by itself.
    await c.nats.stop();
    const restartedAt = Date.now();
    const again = await startNatsServer({
      dir: c.nats.dir,
      port: c.nats.port,
      users: clusterNatsUsers({
        coordinatorPassword: c.nats.coordinator.password,
        agentPassword: c.nats.agent.password,
      }),
    });
    t.after(() => again.stop());
    await waitFor(
      async () => {
        const a = await byHost(c, "host-one");
        return a?.state === "ready" && a.last_seen_at && Date.parse(a.last_seen_at) > restartedAt;
      },
      { timeoutMs: 40_000, what: "host-one heartbeats after the NATS restart" },
    );

    // A clean stop says goodbye.
    await one.stop();
    await waitFor(async () => (await byHost(c, "host-one"))?.state === "left", {
      timeoutMs: 15_000,
      what: "host-one to be marked left",
    });
  });

  test("a wrong join token is refused with a clear error and the agent exits", async (t) => {
    if (!needs(t, { commands: ["nats-server"] })) return;
    const c = await startTestCluster(t);
    const dir = tempDir(t);
    const r = await runCli([
      "agent",
      "--coordinator",
      c.url,
      "--join-token",
      "bj_wrong",
      "--data-dir",
      dir,
      "--grpc-port",
      "0",
    ]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /berth agent: coordinator refused the join: the join token is wrong or revoked/);
  });
});

describe("coordinator start-up failures are one line naming the cause", () => {
  /** Runs `berth coordinator` with a config file holding `fields` over a minimal base. */
  async function startCoordinatorWith(
    t: { after: (fn: () => unknown) => void },
    fields: Record<string, unknown>,
  ) {
    const dir = tempDir(t);
    const cfg = join(dir, "c.json");
    writeFileSync(cfg, JSON.stringify({ port: 0, dataDir: dir, agentNats: { password: "x" }, ...fields }));
    return runCli(["coordinator", "--config", cfg]);
  }

  test("NATS unreachable", async (t) => {
    const natsPort = await freePort();
    const r = await startCoordinatorWith(t, { nats: { url: `nats://127.0.0.1:${natsPort}` } });
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(`berth coordinator: cannot connect to NATS at nats://127\\.0\\.0\\.1:${natsPort}: `),
    );
  });

  test("store unreachable", async (t) => {
    const r = await startCoordinatorWith(t, {
      store: "postgres://berth:pw@127.0.0.1:1/berth",
      nats: { url: "nats://127.0.0.1:1" },
    });
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    assert.match(
      r.stderr,
      /berth coordinator: cannot open the store: cannot reach PostgreSQL store postgres:\/\/berth:\*\*\*@127\.0\.0\.1:1\/berth/,
    );
  });
});
