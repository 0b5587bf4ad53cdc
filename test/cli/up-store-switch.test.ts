// `berth up` on a data dir whose records are in one store, started so that it
// would use another (--replicas after a single-coordinator start, or one
// coordinator after --replicas), is refused before anything is written or
// started, saying what works; the backup command it names works, and the
// restore into PostgreSQL it rules out is indeed refused by berth admin restore.

import assert from "node:assert/strict";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { loadOrCreateUpCluster } from "../../cli/up/cluster-files.ts";
import { postgresBinDir, startUpPostgres } from "../../cli/up/replicas.ts";
import { upPostgresData, upSqliteStore } from "../../cli/up/store-switch.ts";
import { migrateToLatest, openDatabase } from "../../coordinator/store/db.ts";
import { freePort } from "../../shared/net.ts";
import { runCli } from "../helpers/cluster.ts";
import { needs, tempDir, unavailable } from "../helpers/env.ts";
import { startTestPostgres } from "../helpers/postgres.ts";

/** A data dir as one-coordinator `berth up` leaves it: its SQLite store (migrated) and coordinator.json. */
async function singleNodeDataDir(dir: string): Promise<void> {
  const opened = await openDatabase(`sqlite:${upSqliteStore(dir)}`);
  try {
    await migrateToLatest(opened.db);
    const now = new Date().toISOString();
    await opened.db
      .insertInto("workspaces")
      .values({ id: "w1", external_id: "ws-kept", name: "kept", created_at: now, signature_token: null })
      .execute();
  } finally {
    await opened.db.destroy();
  }
  writeFileSync(
    join(dir, "coordinator.json"),
    JSON.stringify({ port: 8420, dataDir: join(dir, "coordinator"), volumeRoot: join(dir, "volumes") }),
    { mode: 0o600 },
  );
}

test("--replicas or --store on a single-coordinator data dir is refused, naming what works", async (t) => {
  if (!needs(t, { commands: ["tar", "pg_restore", "psql"] })) return;
  if (!postgresBinDir()) return void unavailable(t, "needs PostgreSQL's server (apt-get install postgresql)");
  const dir = tempDir(t, "berth-up-store-");
  loadOrCreateUpCluster(dir, {});
  const saved = readFileSync(join(dir, "cluster.json"), "utf8");
  await singleNodeDataDir(dir);

  for (const [replicas, store, flag] of [
    [3, false, "--replicas"],
    [1, true, "--store"],
  ] as const) {
    assert.throws(
      () => loadOrCreateUpCluster(dir, {}, replicas, { store }),
      (e: Error & { code?: string }) => {
        assert.equal(e.code, "failed_precondition");
        assert.ok(e.message.includes(`its records are in the SQLite store ${upSqliteStore(dir)}`), e.message);
        assert.ok(e.message.includes(`${flag} needs a PostgreSQL store`), e.message);
        assert.ok(e.message.includes(`berth up --data-dir ${dir}, no --replicas or --store`), e.message);
        assert.ok(e.message.includes("berth up --replicas N --data-dir NEW_DIR"), e.message);
        return true;
      },
    );
  }
  assert.equal(readFileSync(join(dir, "cluster.json"), "utf8"), saved, "a refused start writes nothing");
  assert.doesNotThrow(() => loadOrCreateUpCluster(dir, {}), "one coordinator, as before, starts");

  // The real command: one line on stderr, exit 1, nothing started.
  const r = await runCli(["up", "--data-dir", dir, "--replicas", "3", "--no-containers"]);
  assert.equal(r.code, 1, r.stdout);
  assert.match(r.stderr, /^berth up: .* was started with one coordinator: .*\n$/);
  assert.equal(r.stdout, "");
  assert.equal(existsSync(join(dir, "nats")), false);
  assert.equal(upPostgresData(dir), undefined);

  // The backup command the refusal names works on this data dir...
  const named = /Keep a copy of this one first with: (berth admin backup .*) FILE$/.exec(r.stderr.trim());
  assert.ok(named, r.stderr);
  const archive = join(tempDir(t, "berth-up-store-backup-"), "single.tar");
  const words = named[1]!.split(" ").slice(1);
  const backup = await runCli([...words, archive]);
  assert.equal(backup.code, 0, backup.stderr);
  assert.match(backup.stdout, /^wrote .*single\.tar: \d+ files/);

  // ...and restoring it into PostgreSQL is refused, as the message says (a store of the same kind only).
  const pg = await startTestPostgres(t);
  const restore = await runCli([
    ...["admin", "restore", "--data-dir", join(tempDir(t, "berth-up-store-restore-"), "coordinator")],
    ...["--store", pg.url, archive],
  ]);
  assert.equal(restore.code, 1, restore.stdout);
  assert.match(restore.stderr, /the backup holds a sqlite store; restore it into a sqlite store/);
});

test("one coordinator on a data dir started with --replicas is refused: its records are in PostgreSQL", async (t) => {
  if (!postgresBinDir()) return void unavailable(t, "needs PostgreSQL's server (apt-get install postgresql)");
  const dir = tempDir(t, "berth-up-store-");
  loadOrCreateUpCluster(dir, {}, 3);
  const saved = readFileSync(join(dir, "cluster.json"), "utf8");
  // The PostgreSQL `berth up --replicas` runs, made where it makes it (as root, under /var/lib/postgresql).
  const pg = await startUpPostgres(join(dir, "postgres"), await freePort());
  t.after(() => rmSync(dirname(pg.dataDir), { recursive: true, force: true }));
  await pg.stop();
  assert.equal(upPostgresData(dir), pg.dataDir);

  assert.throws(
    () => loadOrCreateUpCluster(dir, {}),
    (e: Error & { code?: string }) => {
      assert.equal(e.code, "failed_precondition");
      assert.match(
        e.message,
        /was started with --replicas: its records are in the PostgreSQL berth up runs \(data in .*\), and one coordinator would start from an empty SQLite store\. Start it with --replicas again/,
      );
      return true;
    },
  );
  assert.equal(readFileSync(join(dir, "cluster.json"), "utf8"), saved);
  assert.equal(existsSync(upSqliteStore(dir)), false);
  assert.doesNotThrow(() => loadOrCreateUpCluster(dir, {}, 3));
  assert.doesNotThrow(() => loadOrCreateUpCluster(dir, {}, 1, { store: true }), "an external store is named");
});
