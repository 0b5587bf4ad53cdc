// `berth admin backup`: one archive holding a coordinator's store (a
// consistent copy, taken while the coordinator runs), its secrets key, the
// code archives (objects), task outputs, volume files and bootstrap tokens.
// The cluster CA and every record live in the store.

import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";
import SQLite from "better-sqlite3";
import { keyFingerprint } from "../../coordinator/secrets/key.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { BERTH_VERSION } from "../../shared/version.ts";
import {
  FORMAT,
  FORMAT_VERSION,
  MANIFEST,
  type Manifest,
  describeFiles,
  listFiles,
  tarCreate,
} from "./archive.ts";
import { type CoordinatorLayout, backupParts, sqliteFileOf } from "./layout.ts";
import { isPostgresUrl, pgDump, pgSchemaVersion } from "./postgres.ts";

/** The store in the archive: a SQLite file, or pg_dump's custom format of a PostgreSQL store. */
export const STORE_ENTRY = { sqlite: "store/berth.db", postgres: "store/berth.pgdump" } as const;

/** The store's last applied migration. */
export function schemaVersionOf(sqliteFile: string): string {
  const db = new SQLite(sqliteFile, { readonly: true, fileMustExist: true });
  try {
    const row = db.prepare("SELECT max(name) AS v FROM kysely_migration").get() as { v: string | null };
    if (!row.v) throw new Error("no migration applied");
    return row.v;
  } catch (e) {
    throw new BerthError("failed_precondition", `${sqliteFile} is not a berth store: ${describeError(e)}`);
  } finally {
    db.close();
  }
}

/** VACUUM INTO: a consistent copy even while the coordinator writes (it reads one snapshot). */
function copyStore(sqliteFile: string, target: string): void {
  if (!existsSync(sqliteFile))
    throw new BerthError(
      "not_found",
      `no store at ${sqliteFile}: give --data-dir, --store or --config of the coordinator`,
    );
  const db = new SQLite(sqliteFile, { fileMustExist: true });
  try {
    db.pragma("busy_timeout = 10000");
    db.prepare("VACUUM INTO ?").run(target);
  } catch (e) {
    throw new BerthError("unavailable", `cannot copy the store ${sqliteFile}: ${describeError(e)}`);
  } finally {
    db.close();
  }
}

export interface BackupResult {
  archive: string;
  manifest: Manifest;
  /** Parts not found here (left out), for the operator to know. */
  absent: string[];
}

export async function backupCoordinator(layout: CoordinatorLayout, out: string): Promise<BackupResult> {
  const engine = isPostgresUrl(layout.store) ? "postgres" : "sqlite";
  const archive = resolve(out);
  if (existsSync(archive)) throw new BerthError("conflict", `${archive} exists; give another path`);
  mkdirSync(dirname(archive), { recursive: true });
  // Staged next to the archive: same filesystem, and never inside the data directory being copied.
  const stage = mkdtempSync(join(dirname(archive), ".berth-backup-"));
  const tmp = `${archive}.tmp-${process.pid}`;
  try {
    chmodSync(stage, 0o700);
    mkdirSync(join(stage, "store"));
    const storeCopy = join(stage, STORE_ENTRY[engine]);
    if (engine === "postgres") await pgDump(layout.store, storeCopy);
    else copyStore(sqliteFileOf(layout.store), storeCopy);
    const absent: string[] = [];
    let keyId: string | undefined;
    for (const part of backupParts(layout)) {
      if (!existsSync(part.path)) {
        absent.push(`${part.name} (${part.path})`);
        continue;
      }
      const kind = statSync(part.path).isDirectory() ? "dir" : "file";
      if (kind !== part.kind)
        throw new BerthError("failed_precondition", `${part.path} should be a ${part.kind}`);
      mkdirSync(dirname(join(stage, part.name)), { recursive: true });
      cpSync(part.path, join(stage, part.name), { recursive: true, preserveTimestamps: true });
      if (part.name === "keys/secrets.key") keyId = keyFingerprint(secretKeyBytes(part.path));
    }
    const manifest: Manifest = {
      format: FORMAT,
      version: FORMAT_VERSION,
      created_at: new Date().toISOString(),
      berth_version: BERTH_VERSION,
      store_engine: engine,
      schema_version:
        engine === "postgres" ? await pgSchemaVersion(layout.store) : schemaVersionOf(storeCopy),
      ...(keyId ? { secrets_key_id: keyId } : {}),
      files: await describeFiles(stage, listFiles(stage)),
    };
    writeFileSync(join(stage, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o600 });
    await tarCreate(tmp, stage);
    // It holds the secrets key: root-only, like the key file.
    chmodSync(tmp, 0o600);
    renameSync(tmp, archive);
    return { archive, manifest, absent };
  } finally {
    rmSync(stage, { recursive: true, force: true });
    rmSync(tmp, { force: true });
  }
}

/** The key file's 32 bytes (raw, or base64 text as the coordinator also accepts). */
function secretKeyBytes(file: string): Buffer {
  const raw = readFileSync(file);
  return raw.length === 32 ? raw : Buffer.from(raw.toString("latin1").trim(), "base64");
}
