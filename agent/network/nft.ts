import { isMissingError, run, tryRun } from "./exec.ts";

/** Applies a script as one nftables transaction: all of it or none of it. */
export async function applyNft(script: string): Promise<void> {
  await run("nft", ["-f", "-"], script);
}

/**
 * Runs removal statements as one transaction; when that fails because some
 * object is already gone, runs them one at a time and ignores the missing
 * ones, so removal is idempotent.
 */
export async function removeNft(statements: string[]): Promise<void> {
  if (statements.length === 0) return;
  const all = await tryRun("nft", ["-f", "-"], `${statements.join("\n")}\n`);
  if (all.exitCode === 0) return;
  for (const s of statements) {
    const r = await tryRun("nft", ["-f", "-"], `${s}\n`);
    if (r.exitCode !== 0 && !isMissingError(r.stderr)) {
      await run("nft", ["-f", "-"], `${s}\n`); // throws with the command's own message
    }
  }
}

export async function listNftTables(): Promise<{ family: string; name: string }[]> {
  const out = await run("nft", ["-j", "list", "tables"]);
  const parsed = JSON.parse(out) as { nftables: { table?: { family: string; name: string } }[] };
  return parsed.nftables.flatMap((e) => (e.table ? [{ family: e.table.family, name: e.table.name }] : []));
}

/** Deletes berth's two tables of this name; absent is fine. Other tables are never touched. */
export async function deleteNftTables(table: string): Promise<void> {
  const present = await listNftTables();
  for (const family of ["inet", "bridge"]) {
    if (present.some((t) => t.family === family && t.name === table)) {
      await removeNft([`delete table ${family} ${table}`]);
    }
  }
}
