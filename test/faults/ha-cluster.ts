// A `berth up --replicas 3` cluster for the fault cases of several
// coordinators (test/faults/ha.test.ts, test/faults/ha-sandbox.test.ts):
// three coordinators, a three-node JetStream cluster and PostgreSQL, a
// round-robin balancer over the coordinators, a client of the store, and
// the teardown of the PostgreSQL berth up runs outside the test's home.

import assert from "node:assert/strict";
import { readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import type { TestContext } from "node:test";
import pg from "pg";
import { waitFor } from "../../shared/net.ts";
import { type BerthUp, startBerthUp } from "../helpers/berth-up.ts";
import { coordinatorPidByConfig, pidWhere } from "../helpers/procs.ts";
import { type RoundRobin, startRoundRobin } from "../helpers/round-robin.ts";
import { Teardown } from "../network/helpers.ts";

export interface HaCluster {
  up: BerthUp;
  td: Teardown;
  /** The three coordinators' URLs, coordinator 1 first. */
  coordinators: string[];
  /** A round-robin balancer over `coordinators`. */
  lb: RoundRobin;
  /** A client of the coordinators' PostgreSQL store. */
  db: pg.Client;
  /** PostgreSQL's data directory. */
  pgData: string;
  /** BERTH_URL of the balancer, for the CLI and the SDK. */
  env: { BERTH_URL: string };
  /** The pid of coordinator `n` (1-based) of this cluster, or undefined when none runs. */
  coordinatorPid(n: number): number | undefined;
  /** SIGKILLs coordinator `n` (1-based); returns the pid it killed. berth up starts it again after a second. */
  killCoordinator(n: number): number;
  /**
   * Stops berth up itself (SIGSTOP), so a coordinator killed meanwhile stays
   * dead (nobody starts it again) while the rest of the cluster runs; the
   * function returned resumes it (and it starts the dead one again). Resumed
   * at teardown in any case.
   */
  pauseSupervisor(): () => void;
}

/** The pid of the postgres server whose data dir is `data`. */
export function postgresPid(data: string): number | undefined {
  try {
    return Number(readFileSync(join(data, "postmaster.pid"), "utf8").split("\n")[0]);
  } catch {
    return undefined;
  }
}

export function existsPid(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pid of `berth up --data-dir <dataDir>` (this cluster's supervisor). */
export function berthUpPid(dataDir: string): number | undefined {
  return pidWhere((argv) => {
    const i = argv.indexOf("--data-dir");
    return i > 0 && argv[i + 1] === dataDir && argv[i - 1] === "up";
  });
}

/** Starts the cluster; everything it made goes with the test (the Teardown of `t`). */
export async function startHaCluster(t: TestContext): Promise<HaCluster> {
  const td = new Teardown(t);
  const up = await startBerthUp(td, ["--replicas", "3"]);
  const out = up.output();
  const coordinators = /coordinators:\s+(.+?)\s+\(any one/.exec(out)?.[1]?.split(" ") ?? [];
  assert.equal(coordinators.length, 3, `three coordinator URLs in:\n${out}`);
  const pgLine = /PostgreSQL on 127\.0\.0\.1:(\d+), data in (\S+)/.exec(out);
  assert.ok(pgLine, `berth up ran PostgreSQL:\n${out}`);
  const pgData = pgLine[2] as string;
  // berth up keeps PostgreSQL's data out of a 0700 home (under /var/lib/postgresql): gone with the test.
  td.defer(async () => {
    const pid = postgresPid(pgData);
    if (pid) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {}
    }
    await waitFor(() => !pid || !existsPid(pid), { timeoutMs: 30_000, what: "postgres to exit" });
    if (pgData.startsWith("/var/lib/postgresql/berth-up/"))
      rmSync(dirname(pgData), { recursive: true, force: true });
  });
  // The coordinators' store is the PostgreSQL berth up runs.
  const db = new pg.Client({ connectionString: `postgres://berth@127.0.0.1:${pgLine[1]}/postgres` });
  await db.connect();
  td.defer(() => db.end());
  const lb = await startRoundRobin(coordinators);
  td.defer(() => lb.close());
  const coordinatorPid = (n: number) =>
    coordinatorPidByConfig(join(up.dataDir, n === 1 ? "coordinator.json" : `coordinator-${n}.json`));
  return {
    up,
    td,
    coordinators,
    lb,
    db,
    pgData,
    env: { BERTH_URL: lb.url },
    coordinatorPid,
    killCoordinator(n) {
      const pid = coordinatorPid(n);
      assert.ok(pid, `coordinator-${n} runs`);
      process.kill(pid, "SIGKILL");
      return pid;
    },
    pauseSupervisor() {
      const pid = berthUpPid(up.dataDir);
      assert.ok(pid, "berth up runs");
      const resume = () => {
        try {
          process.kill(pid, "SIGCONT");
        } catch {}
      };
      td.defer(resume);
      process.kill(pid, "SIGSTOP");
      return resume;
    },
  };
}
