// Which store a `berth up` data directory already holds, and the refusal of a
// start that would silently begin from an empty one: a directory first run
// with one coordinator keeps its records in SQLite (coordinator/berth.db),
// one run with --replicas in the PostgreSQL berth up runs. berth does not move
// a store from one engine to the other (`berth admin restore` puts a backup
// back into a store of the same kind), so switching is refused with the ways
// that work.

import { createHash } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { BerthError } from "../../shared/errors.ts";

/** The SQLite store a single-coordinator `berth up` keeps under its data dir. */
export const upSqliteStore = (dataDir: string) => join(dataDir, "coordinator", "berth.db");

/**
 * Where the PostgreSQL of `berth up --replicas` keeps its data. As root the server runs as
 * `postgres`, which must be able to reach it: a data dir under a 0700 home (/root/.berth/up) is
 * not. Then the data goes to Debian's postgres home, /var/lib/postgresql/berth-up/<hash of the
 * wanted dir>, the same one at every start.
 */
export function postgresReachableDir(wanted: string): string {
  const abs = resolve(wanted);
  for (let d = dirname(abs); ; d = dirname(d)) {
    if (existsSync(d) && (statSync(d).mode & 0o001) === 0)
      return join(
        "/var/lib/postgresql/berth-up",
        createHash("sha256").update(abs).digest("hex").slice(0, 16),
      );
    if (d === dirname(d)) return abs;
  }
}

/** The PostgreSQL data directory of an earlier `berth up --replicas` on this data dir, if there is one. */
export function upPostgresData(dataDir: string): string | undefined {
  const wanted = join(dataDir, "postgres");
  const dirs = [process.getuid?.() === 0 ? postgresReachableDir(wanted) : wanted, wanted];
  return dirs.map((d) => join(d, "data")).find((d) => existsSync(join(d, "PG_VERSION")));
}

/**
 * Refuses a start whose store is not the one this data dir's records are in: --replicas (or
 * --store) on a directory started with one coordinator, or one coordinator without --store on a
 * directory started with --replicas. Checked before anything is written or started.
 */
export function refuseStoreSwitch(dataDir: string, replicas: number, externalStore: boolean): void {
  const sqlite = upSqliteStore(dataDir);
  const postgres = upPostgresData(dataDir);
  const wantsPostgres = replicas > 1 || externalStore;
  // Both present: a directory that already moved before this check existed; its records may be in either.
  if (wantsPostgres && existsSync(sqlite) && (externalStore || !postgres)) {
    const config = join(dataDir, "coordinator.json");
    const backup = existsSync(config)
      ? `berth admin backup --config ${config} FILE`
      : `berth admin backup --data-dir ${join(dataDir, "coordinator")} FILE`;
    throw new BerthError(
      "failed_precondition",
      `${dataDir} was started with one coordinator: its records are in the SQLite store ${sqlite}, and ` +
        `${replicas > 1 ? "--replicas" : "--store"} needs a PostgreSQL store, which berth cannot fill from SQLite ` +
        "(berth admin restore puts a backup back into a store of the same kind only). Either start it as before, " +
        `with one coordinator (berth up --data-dir ${dataDir}, no --replicas or --store), or run the ` +
        "replicated cluster from a new data directory (berth up --replicas N --data-dir NEW_DIR) and deploy " +
        "your apps, secrets and volume files there again. Keep a copy of this one first with: " +
        backup,
    );
  }
  if (!wantsPostgres && postgres && !existsSync(sqlite)) {
    throw new BerthError(
      "failed_precondition",
      `${dataDir} was started with --replicas: its records are in the PostgreSQL berth up runs (data in ` +
        `${postgres}), and one coordinator would start from an empty SQLite store. Start it with --replicas ` +
        "again (--replicas 2 or more), or name that store with --store postgres://...",
    );
  }
}
