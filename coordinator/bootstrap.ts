import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "pino";
import type { Store } from "./records.ts";

/**
 * First start of an empty store: one workspace named "default", an admin
 * token for it and a join token for hosts, written to files only root can
 * read (the store keeps only their hashes).
 */
export async function bootstrapEmptyStore(
  store: Store,
  files: { adminTokenFile: string; joinTokenFile: string },
  log: Logger,
): Promise<boolean> {
  if ((await store.workspaces.count()) > 0) return false;
  const ws = await store.workspaces.create("default");
  const admin = await store.tokens.create(ws.id, { name: "admin (bootstrap)", admin: true });
  const join = await store.joinTokens.create("bootstrap");
  writeSecretFile(files.adminTokenFile, admin.secret);
  writeSecretFile(files.joinTokenFile, join.secret);
  log.info(
    { workspace: ws.externalId, adminTokenFile: files.adminTokenFile, joinTokenFile: files.joinTokenFile },
    "empty store: created workspace 'default', an admin token and a join token",
  );
  return true;
}

function writeSecretFile(path: string, secret: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  if (existsSync(path)) writeFileSync(path, "", { mode: 0o600 });
  writeFileSync(path, `${secret}\n`, { mode: 0o600 });
}
