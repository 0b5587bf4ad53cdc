// `berth admin backup|restore`: a coordinator's whole state in one archive
// and back (docs/operations.md). They run on the coordinator's host, on its
// files: backup while it runs, restore while it is stopped.

import type { Command } from "commander";
import { resolveLayout } from "../admin/layout.ts";

interface LayoutFlags {
  config?: string;
  dataDir?: string;
  store?: string;
}

function layoutOptions(c: Command): Command {
  return c
    .option(
      "--config <file>",
      "the coordinator's JSON config file (its dataDir, store, secretsKeyFile, volumeRoot)",
    )
    .option("--data-dir <dir>", "the coordinator's data directory (default /var/lib/berth, or the config's)")
    .option("--store <url>", "sqlite:PATH of the store (default <data dir>/berth.db, or the config's)");
}

export function adminCommands(program: Command): void {
  const admin = program
    .command("admin")
    .description("operate the coordinator's own state: backup and restore");
  layoutOptions(
    admin
      .command("backup")
      .description(
        "write the store (a consistent copy, while the coordinator runs), the secrets key, code archives, " +
          "task outputs, volume files and bootstrap tokens into one tar with a checksummed manifest",
      )
      .argument("<archive>", "the tar file to write (must not exist); root-only: it holds the secrets key"),
  ).action(async (archive: string, o: LayoutFlags) => {
    // Loaded here: `berth --help` and the other commands never load SQLite.
    const { backupCoordinator } = await import("../admin/backup.ts");
    const r = await backupCoordinator(await resolveLayout(o), archive);
    const bytes = r.manifest.files.reduce((n, f) => n + f.size, 0);
    process.stdout.write(
      `wrote ${r.archive}: ${r.manifest.files.length} files, ${bytes} bytes, store schema ${r.manifest.schema_version}\n`,
    );
    for (const a of r.absent) process.stdout.write(`  not present, left out: ${a}\n`);
    if (!r.manifest.secrets_key_id)
      process.stdout.write(
        "  no secrets key file: if the coordinator takes BERTH_SECRETS_KEY from its environment, keep that value with this backup\n",
      );
  });
  layoutOptions(
    admin
      .command("restore")
      .description(
        "put a backup back where a coordinator with these settings looks for it; refuses a non-empty data directory without --force",
      )
      .argument("<archive>", "a file written by berth admin backup")
      .option("--force", "replace what the data directory holds (stop the coordinator first)"),
  ).action(async (archive: string, o: LayoutFlags & { force?: boolean }) => {
    const { restoreCoordinator } = await import("../admin/restore.ts");
    const r = await restoreCoordinator(await resolveLayout(o), archive, { force: o.force });
    process.stdout.write(
      `restored the backup of ${r.manifest.created_at} (berth ${r.manifest.berth_version}, schema ${r.manifest.schema_version}):\n`,
    );
    for (const p of r.placed) process.stdout.write(`  ${p}\n`);
    process.stdout.write(
      "start the coordinator on it (chown -R berth:berth the data directory if it runs as user berth)\n",
    );
  });
}
