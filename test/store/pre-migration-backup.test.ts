// A SQLite store is copied aside, named by its schema version, before pending
// migrations are applied to it (coordinator/store/db.ts; docs/operations.md).

import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import SQLite from "better-sqlite3";
import { Migrator } from "kysely";
import { Store } from "../../coordinator/records.ts";
import { migrationProvider } from "../../coordinator/store/migrations/index.ts";
import { openDatabase, preMigrationBackupPath } from "../../coordinator/store/index.ts";
import { tempDir } from "../helpers/env.ts";

test("a store with pending migrations is copied aside, named by its version, before they run", async (t) => {
  const dir = tempDir(t, "berth-premigrate-");
  const file = join(dir, "berth.db");
  // A store made by an older berth: every migration but the last.
  const names = Object.keys(await migrationProvider.getMigrations()).sort();
  const older = names[names.length - 2]!;
  const opened = await openDatabase(`sqlite:${file}`);
  const ws = await (async () => {
    try {
      const { error } = await new Migrator({ db: opened.db, provider: migrationProvider }).migrateTo(older);
      assert.equal(error, undefined);
      const s = new Store(opened.db, opened.engine, opened.display);
      return await s.workspaces.create("before-upgrade");
    } finally {
      await opened.db.destroy();
    }
  })();

  const store = await Store.open(`sqlite:${file}`);
  await store.close();

  const backup = preMigrationBackupPath(file, older);
  assert.equal(backup, join(dir, `berth.db.before-${older}.bak`));
  assert.deepEqual(
    readdirSync(dir).filter((f) => f.endsWith(".bak")),
    [`berth.db.before-${older}.bak`],
  );
  const copy = new SQLite(backup, { readonly: true });
  try {
    const applied = copy.prepare("SELECT name FROM kysely_migration ORDER BY name").all() as {
      name: string;
    }[];
    assert.equal(applied[applied.length - 1]?.name, older, "the copy holds the schema before the upgrade");
    const row = copy.prepare("SELECT name FROM workspaces WHERE id = ?").get(ws.id) as { name: string };
    assert.equal(row.name, "before-upgrade");
  } finally {
    copy.close();
  }

  // Up to date now: opening again copies nothing more; a new store is never copied.
  await (await Store.open(`sqlite:${file}`)).close();
  await (await Store.open(`sqlite:${join(dir, "fresh.db")}`)).close();
  assert.equal(readdirSync(dir).filter((f) => f.endsWith(".bak")).length, 1);
});
