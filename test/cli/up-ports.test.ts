// `berth up` keeps its ports in cluster.json; a later start whose ports clash
// (first started with one coordinator, now with --replicas 3, the saved agent
// and PostgreSQL ports fall among the coordinators') is refused before
// anything is written or started, naming each clash and the flag that moves it.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { loadOrCreateUpCluster, upPortUses } from "../../cli/up/cluster-files.ts";
import { runCli } from "../helpers/cluster.ts";
import { tempDir } from "../helpers/env.ts";

test("saved ports that clash at a later start are refused, naming the clash and the flag; cluster.json stays", (t) => {
  const dir = tempDir(t, "berth-up-ports-");
  const first = loadOrCreateUpCluster(dir, {});
  assert.deepEqual(
    [first.natsPort, first.coordinatorPort, first.agentGrpcPort, first.postgresPort],
    [4222, 8420, 8421, 8422],
  );
  const saved = readFileSync(join(dir, "cluster.json"), "utf8");

  assert.throws(
    () => loadOrCreateUpCluster(dir, {}, 3),
    (e: Error & { code?: string }) => {
      assert.equal(e.code, "invalid_request");
      assert.match(
        e.message,
        /port 8421 is both coordinator 2's \(saved in .*cluster\.json\) and the agent's gRPC listener's \(saved in .*cluster\.json\): move one with --grpc-port/,
      );
      assert.match(
        e.message,
        /port 8422 is both coordinator 3's .* and PostgreSQL's \(saved in .*\): move one with --postgres-port/,
      );
      return true;
    },
  );
  assert.equal(readFileSync(join(dir, "cluster.json"), "utf8"), saved, "a refused start writes nothing");

  // With the ports moved it starts, and keeps them (and the secrets) for next time.
  const moved = loadOrCreateUpCluster(dir, { agentGrpcPort: 8430, postgresPort: 8431 }, 3);
  assert.equal(moved.natsAgentPassword, first.natsAgentPassword);
  assert.deepEqual(loadOrCreateUpCluster(dir, {}, 3), moved);
  // An external store (--store) runs no PostgreSQL: its port clashes with nothing.
  assert.doesNotThrow(() => loadOrCreateUpCluster(dir, { postgresPort: 8420 }, 3, { store: true }));
});

test("ports given on the command line that clash are refused too, NATS cluster routes included", (t) => {
  const dir = tempDir(t, "berth-up-ports-");
  assert.throws(
    () => loadOrCreateUpCluster(dir, { coordinatorPort: 4222 }),
    /port 4222 is both NATS's .* and the coordinator's \(--port\)/,
  );
  // Three NATS nodes: clients 5000-5002, routes 5003-5005.
  const uses = upPortUses(
    {
      natsPort: 5000,
      coordinatorPort: 8420,
      agentGrpcPort: 8423,
      postgresPort: 8424,
      natsCoordinatorPassword: "",
      natsAgentPassword: "",
    },
    3,
  );
  assert.deepEqual(
    uses.filter((u) => u.key === "natsPort").map((u) => u.port),
    [5000, 5001, 5002, 5003, 5004, 5005],
  );
  assert.throws(
    () => loadOrCreateUpCluster(dir, { natsPort: 8415 }, 3),
    /port 8420 is both NATS node 3's route/,
  );
});

test("berth up refuses the clash with one line and exit 1, before starting anything", async (t) => {
  const dir = tempDir(t, "berth-up-ports-");
  loadOrCreateUpCluster(dir, {});
  const r = await runCli(["up", "--data-dir", dir, "--replicas", "3", "--no-containers"]);
  assert.equal(r.code, 1, r.stdout);
  assert.match(
    r.stderr,
    /^berth up: port 8421 is both coordinator 2's .* move one with --grpc-port; port 8422 .*--postgres-port\n$/,
  );
  assert.equal(r.stdout, "");
});
