// Where a coordinator keeps what a backup must hold, resolved the way the
// coordinator resolves it (coordinator/options.ts): from its config file,
// with --data-dir and --store over it.

import { join, resolve } from "node:path";
import type { CoordinatorOptions } from "../../coordinator/options.ts";
import { HOST_ID_FILE } from "../../shared/host-id.ts";

export interface CoordinatorLayout {
  dataDir: string;
  /** `sqlite:PATH` or a postgres:// URL. */
  store: string;
  secretsKeyFile: string;
  volumeRoot: string;
  adminTokenFile: string;
  joinTokenFile: string;
}

/**
 * The parts of a backup: each an archive path and where it lives here.
 * Directories are copied whole; a part that does not exist is left out.
 */
export function backupParts(l: CoordinatorLayout): { name: string; path: string; kind: "file" | "dir" }[] {
  return [
    { name: "keys/secrets.key", path: l.secretsKeyFile, kind: "file" },
    { name: "objects", path: join(l.dataDir, "objects", "sha256"), kind: "dir" },
    { name: "outputs", path: join(l.dataDir, "outputs"), kind: "dir" },
    { name: "volumes", path: l.volumeRoot, kind: "dir" },
    { name: "data/admin-token", path: l.adminTokenFile, kind: "file" },
    { name: "data/join-token", path: l.joinTokenFile, kind: "file" },
    { name: `data/${HOST_ID_FILE}`, path: join(l.dataDir, HOST_ID_FILE), kind: "file" },
  ];
}

/** The SQLite file of a `sqlite:PATH` (or plain path) store URL. */
export function sqliteFileOf(store: string): string {
  return resolve(store.startsWith("sqlite:") ? store.slice("sqlite:".length) : store);
}

export async function resolveLayout(o: {
  config?: string;
  dataDir?: string;
  store?: string;
}): Promise<CoordinatorLayout> {
  let file: Partial<CoordinatorOptions> = {};
  if (o.config) {
    const { readCoordinatorConfig } = await import("../../coordinator/options.ts");
    file = readCoordinatorConfig(o.config);
  }
  // As the coordinator merges them: --data-dir and --store over the file; the file's own paths stay.
  const dataDir = resolve(o.dataDir ?? file.dataDir ?? "/var/lib/berth");
  return {
    dataDir,
    store: o.store ?? file.store ?? `sqlite:${join(dataDir, "berth.db")}`,
    secretsKeyFile: resolve(file.secretsKeyFile ?? join(dataDir, "keys", "secrets.key")),
    volumeRoot: resolve(file.volumeRoot ?? join(dataDir, "volumes")),
    adminTokenFile: resolve(file.bootstrap?.adminTokenFile ?? join(dataDir, "admin-token")),
    joinTokenFile: resolve(file.bootstrap?.joinTokenFile ?? join(dataDir, "join-token")),
  };
}
