import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import SQLite from "better-sqlite3";
import {
  type Compilable,
  CompiledQuery,
  Kysely,
  Migrator,
  PostgresDialect,
  type QueryResult,
  SqliteDialect,
  type SqliteDatabase,
} from "kysely";
import pg from "pg";
import { BerthError, describeError } from "../../shared/errors.ts";
import { migrationProvider } from "./migrations/index.ts";
import type { Database } from "./schema.ts";

export type Engine = "sqlite" | "postgres";

export interface OpenedDatabase {
  db: Kysely<Database>;
  engine: Engine;
  /** The store URL with any password removed, safe to print. */
  display: string;
  /** The SQLite file (absent for PostgreSQL): copied aside before migrations run. */
  sqliteFile?: string;
}

/**
 * Opens the store named by `url`: `postgres://...` (or `postgresql://`) for
 * PostgreSQL, `sqlite:PATH` or a plain path for SQLite. Checks the connection.
 */
export async function openDatabase(url: string): Promise<OpenedDatabase> {
  if (/^postgres(ql)?:\/\//.test(url)) {
    const display = redactUrl(url);
    const pool = new pg.Pool({ connectionString: url, max: 10, connectionTimeoutMillis: 5000 });
    // An idle client's error (server restart) must not crash the process; neither must one a
    // transaction holds between its queries (the pool's handler covers idle clients only): the
    // query in flight fails on its own, and the pool drops the client when its connection ends.
    pool.on("error", () => {});
    pool.on("connect", (client) => client.on("error", () => {}));
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    try {
      const c = await pool.connect();
      c.release();
    } catch (e) {
      await db.destroy().catch(() => {});
      throw new BerthError("unavailable", `cannot reach PostgreSQL store ${display}: ${describeError(e)}`);
    }
    return { db, engine: "postgres", display };
  }
  const path = resolve(url.startsWith("sqlite:") ? url.slice("sqlite:".length) : url);
  let sqlite: SQLite.Database;
  try {
    mkdirSync(dirname(path), { recursive: true });
    sqlite = new SQLite(path);
    sqlite.pragma("journal_mode = WAL");
    // With WAL, NORMAL syncs at checkpoints, not at every commit: a power loss
    // may drop the last commits but never corrupts the store, and task
    // batches do not wait for a disk flush each.
    sqlite.pragma("synchronous = NORMAL");
    sqlite.pragma("busy_timeout = 5000");
    sqlite.pragma("foreign_keys = ON");
  } catch (e) {
    throw new BerthError("unavailable", `cannot open SQLite store ${path}: ${describeError(e)}`);
  }
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: cachingStatements(sqlite) }) });
  return { db, engine: "sqlite", display: `sqlite:${path}`, sqliteFile: path };
}

/**
 * Kysely's SQLite driver prepares every query anew; preparing costs more than
 * running the small statements the task path issues, so statements are kept
 * by their SQL text (bounded: the oldest is dropped past the limit).
 */
function cachingStatements(sqlite: SQLite.Database, limit = 512): SqliteDatabase {
  const cache = new Map<string, SQLite.Statement>();
  return {
    close: () => {
      cache.clear();
      sqlite.close();
    },
    prepare(text: string) {
      let st = cache.get(text);
      if (st) return st;
      st = sqlite.prepare(text);
      if (cache.size >= limit) cache.delete(cache.keys().next().value as string);
      cache.set(text, st);
      return st;
    },
  };
}

/**
 * SQL text compiled once per query shape. Building a query with Kysely on
 * every call (operation nodes, freezing, compiling) costs more than SQLite
 * takes to run the small statements of the task path; a shape (the same
 * statement with other values) is compiled the first time and later calls
 * bind only their parameters. The first compile checks that the caller's
 * parameters are the ones Kysely put in the statement, in its order.
 */
export class QueryShapes {
  private readonly texts = new Map<string, string>();

  /** Runs the statement of shape `key` with `params`; `build` makes it (from these same values) the first time. */
  run<R>(
    db: Kysely<Database>,
    key: string,
    params: unknown[],
    build: () => Compilable<R>,
  ): Promise<QueryResult<R>> {
    let text = this.texts.get(key);
    if (text === undefined) {
      const c = build().compile();
      if (c.parameters.length !== params.length || c.parameters.some((p, i) => p !== params[i]))
        throw new Error(`query shape ${key}: its parameters differ from the compiled statement's`);
      text = c.sql;
      this.texts.set(key, text);
    }
    return db.executeQuery(CompiledQuery.raw(text, params) as CompiledQuery<R>);
  }
}

/**
 * Where the copy of a SQLite store made before migrations is kept: beside the
 * store, named by the schema version it holds (its last applied migration).
 */
export function preMigrationBackupPath(sqliteFile: string, schemaVersion: string): string {
  return join(dirname(sqliteFile), `${basename(sqliteFile)}.before-${schemaVersion}.bak`);
}

/**
 * Applies every pending migration; throws with the failing migration's name.
 * With `sqliteFile`, a store that already holds applied migrations and has
 * pending ones is first copied aside (preMigrationBackupPath, a consistent
 * copy made with VACUUM INTO), so an upgrade can be undone by putting the copy
 * back and starting the older berth.
 */
export async function migrateToLatest(db: Kysely<Database>, sqliteFile?: string): Promise<string[]> {
  const migrator = new Migrator({ db, provider: migrationProvider });
  if (sqliteFile !== undefined) await backupBeforeMigrations(db, migrator, sqliteFile);
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === "Error");
  if (error || failed) {
    const which = failed ? ` in ${failed.migrationName}` : "";
    throw new BerthError("internal", `store migration failed${which}: ${describeError(error)}`);
  }
  return (results ?? []).filter((r) => r.status === "Success").map((r) => r.migrationName);
}

async function backupBeforeMigrations(
  db: Kysely<Database>,
  migrator: Migrator,
  sqliteFile: string,
): Promise<string | undefined> {
  const migrations = await migrator.getMigrations();
  const applied = migrations.filter((m) => m.executedAt !== undefined);
  // A new store has nothing to lose; an up-to-date one is not about to change.
  if (applied.length === 0 || applied.length === migrations.length) return undefined;
  const target = preMigrationBackupPath(sqliteFile, applied[applied.length - 1]!.name);
  const tmp = `${target}.tmp-${process.pid}`;
  try {
    rmSync(tmp, { force: true });
    await db.executeQuery(CompiledQuery.raw("VACUUM INTO ?", [tmp]));
    // A copy left by an earlier, failed start at this same version is older: this one replaces it.
    renameSync(tmp, target);
  } catch (e) {
    if (existsSync(tmp)) rmSync(tmp, { force: true });
    throw new BerthError(
      "unavailable",
      `cannot copy the store to ${target} before migrating it (nothing was migrated; free disk space ` +
        `next to ${sqliteFile} and start again): ${describeError(e)}`,
    );
  }
  return target;
}

export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return url.replace(/:[^:@/]*@/, ":***@");
  }
}
