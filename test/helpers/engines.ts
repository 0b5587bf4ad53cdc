// The two database engines the store-backed tests run on.

import { after } from "node:test";
import { type Kysely, Migrator } from "kysely";
import { Store } from "../../coordinator/records.ts";
import { openDatabase } from "../../coordinator/store/db.ts";
import { migrationProvider } from "../../coordinator/store/migrations/index.ts";
import { tempDir } from "./env.ts";
import { startTestPostgres } from "./postgres.ts";

export interface StoreEngine {
  name: "sqlite" | "postgres";
  /** The URL of a fresh, empty database, removed after `t`. */
  url(t: { after: (fn: () => unknown) => void }): Promise<string>;
}

export const STORE_ENGINES: StoreEngine[] = [
  { name: "sqlite", url: async (t) => `sqlite:${tempDir(t)}/berth.db` },
  { name: "postgres", url: async (t) => (await startTestPostgres(t)).url },
];

/**
 * A store on a fresh database of `engine` for the enclosing describe(): call it
 * in the suite's (async) body, not in a before hook, whose end would close it;
 * the store is closed and the database removed when the suite ends, also on
 * failure.
 */
export async function openSuiteStore(engine: StoreEngine): Promise<Store> {
  return (await openSuiteDatabase(engine)).store;
}

/**
 * openSuiteStore's store with the database's URL, for a test that opens it
 * again (a restart); `prepare` is given the empty database's URL before the
 * store opens it.
 */
export async function openSuiteDatabase(
  engine: StoreEngine,
  prepare?: (url: string) => Promise<void>,
): Promise<{ store: Store; url: string }> {
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  const url = await engine.url({ after: (fn) => cleanups.push(fn) });
  await prepare?.(url);
  const store = await Store.open(url);
  cleanups.push(() => store.close());
  return { store, url };
}

/**
 * openSuiteStore's store on a database an older berth made: migrated only up
 * to `migration` and seeded there by `seed` (`DB`: the tables as they were
 * then), then opened, which runs the migrations after it.
 */
export async function openSuiteStoreFrom<DB>(
  engine: StoreEngine,
  migration: string,
  seed: (db: Kysely<DB>) => Promise<void>,
): Promise<Store> {
  const opened = await openSuiteDatabase(engine, async (url) => {
    const { db } = await openDatabase(url);
    try {
      const r = await new Migrator({ db, provider: migrationProvider }).migrateTo(migration);
      if (r.error) throw r.error;
      await seed(db as unknown as Kysely<DB>);
    } finally {
      await db.destroy();
    }
  });
  return opened.store;
}
