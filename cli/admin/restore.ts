// `berth admin restore`: puts a `berth admin backup` archive back where a
// coordinator of this layout looks for it. Into a fresh data directory, or
// over an existing one only with --force (the coordinator stopped).

import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { migrationProvider } from "../../coordinator/store/migrations/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { type Manifest, tarExtract, verifyExtracted } from "./archive.ts";
import { STORE_ENTRY } from "./backup.ts";
import { type CoordinatorLayout, backupParts, sqliteFileOf } from "./layout.ts";
import { displayUrl, isPostgresUrl, pgRestore, pgTableCount } from "./postgres.ts";

/** What of the layout already holds something: a non-empty data directory, or files outside it. */
function occupied(layout: CoordinatorLayout, sqliteFile: string | undefined): string[] {
  const taken: string[] = [];
  if (existsSync(layout.dataDir) && readdirSync(layout.dataDir).length > 0) taken.push(layout.dataDir);
  for (const p of [...(sqliteFile ? [sqliteFile] : []), ...backupParts(layout).map((x) => x.path)]) {
    if (p.startsWith(`${layout.dataDir}/`)) continue;
    if (existsSync(p) && (!statSync(p).isDirectory() || readdirSync(p).length > 0)) taken.push(p);
  }
  return taken;
}

export interface RestoreResult {
  manifest: Manifest;
  placed: string[];
}

export async function restoreCoordinator(
  layout: CoordinatorLayout,
  archive: string,
  o: { force?: boolean },
): Promise<RestoreResult> {
  const engine = isPostgresUrl(layout.store) ? "postgres" : "sqlite";
  const sqliteFile = engine === "sqlite" ? sqliteFileOf(layout.store) : undefined;
  if (!existsSync(archive)) throw new BerthError("not_found", `no backup at ${archive}`);
  const taken = occupied(layout, sqliteFile);
  if (engine === "postgres" && (await pgTableCount(layout.store)) > 0) taken.push(displayUrl(layout.store));
  if (taken.length > 0 && !o.force) {
    throw new BerthError(
      "failed_precondition",
      `${taken.join(", ")} already ${taken.length === 1 ? "holds" : "hold"} data: restore into a fresh data directory ` +
        "(--data-dir), or stop the coordinator and give --force to replace it",
    );
  }
  const parent = dirname(layout.dataDir);
  mkdirSync(parent, { recursive: true });
  const stage = mkdtempSync(join(parent, ".berth-restore-"));
  try {
    chmodSync(stage, 0o700);
    await tarExtract(archive, stage);
    const manifest = await verifyExtracted(stage);
    const known = Object.keys(await migrationProvider.getMigrations());
    if (!known.includes(manifest.schema_version)) {
      throw new BerthError(
        "failed_precondition",
        `the backup's store is at schema ${manifest.schema_version}, which this berth does not know ` +
          `(made by berth ${manifest.berth_version}): restore it with that version or newer`,
      );
    }
    const backupEngine = manifest.store_engine ?? "sqlite";
    if (backupEngine !== engine) {
      throw new BerthError(
        "failed_precondition",
        `the backup holds a ${backupEngine} store; restore it into a ${backupEngine} store ` +
          (backupEngine === "postgres"
            ? "(--store postgres://..., an empty database)"
            : "(--store sqlite:PATH, or no --store)"),
      );
    }
    // Checked and complete: only now is anything here replaced.
    const parts = backupParts(layout);
    if (o.force) {
      const storeFiles = sqliteFile ? [sqliteFile, `${sqliteFile}-wal`, `${sqliteFile}-shm`] : [];
      for (const p of [...storeFiles, ...parts.map((x) => x.path)])
        rmSync(p, { recursive: true, force: true });
    }
    mkdirSync(layout.dataDir, { recursive: true, mode: 0o700 });
    chmodSync(layout.dataDir, 0o700);
    const placed: string[] = [];
    if (sqliteFile) {
      mkdirSync(dirname(sqliteFile), { recursive: true });
      cpSync(join(stage, STORE_ENTRY.sqlite), sqliteFile);
      chmodSync(sqliteFile, 0o600);
      placed.push(sqliteFile);
    } else {
      await pgRestore(layout.store, join(stage, STORE_ENTRY.postgres), o.force === true);
      placed.push(displayUrl(layout.store));
    }
    for (const part of parts) {
      const from = join(stage, part.name);
      if (!existsSync(from)) continue;
      mkdirSync(dirname(part.path), { recursive: true, mode: 0o700 });
      cpSync(from, part.path, { recursive: true, preserveTimestamps: true });
      placed.push(part.path);
    }
    const key = parts.find((p) => p.name === "keys/secrets.key")!.path;
    if (existsSync(key)) {
      chmodSync(dirname(key), 0o700);
      chmodSync(key, 0o600);
    }
    return { manifest, placed };
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}
