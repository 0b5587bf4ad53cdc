// A PostgreSQL store in a backup: pg_dump's custom format out, pg_restore in.
// The password travels in PGPASSWORD, never on a command line (ps shows those).

import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { BerthError } from "../../shared/errors.ts";

const run = promisify(execFile);

export const isPostgresUrl = (store: string) => /^postgres(ql)?:\/\//.test(store);

/** The URL without its password (safe to print and to pass as an argument), and the password. */
function split(url: string): { url: string; password?: string } {
  const u = new URL(url);
  const password = u.password ? decodeURIComponent(u.password) : undefined;
  u.password = "";
  return { url: u.toString(), ...(password !== undefined ? { password } : {}) };
}

/** The store URL with its password left out, for messages. */
export const displayUrl = (url: string): string => split(url).url;

async function pgTool(tool: string, args: string[], url: string): Promise<string> {
  const { password } = split(url);
  try {
    const { stdout } = await run(tool, args, {
      env: { ...process.env, ...(password !== undefined ? { PGPASSWORD: password } : {}) },
      maxBuffer: 64 * 2 ** 20,
    });
    return stdout;
  } catch (e) {
    const err = e as { code?: string; stderr?: string; message: string };
    if (err.code === "ENOENT")
      throw new BerthError(
        "failed_precondition",
        `${tool} is not installed: apt-get install postgresql-client`,
      );
    throw new BerthError(
      "unavailable",
      `${tool} failed: ${(err.stderr || err.message).trim().split("\n").slice(0, 3).join(" ")}`,
    );
  }
}

export async function pgDump(url: string, file: string): Promise<void> {
  await pgTool(
    "pg_dump",
    ["--format=custom", "--no-owner", "--no-privileges", "--file", file, "--dbname", split(url).url],
    url,
  );
}

export async function pgRestore(url: string, file: string, clean: boolean): Promise<void> {
  await pgTool(
    "pg_restore",
    [
      "--no-owner",
      "--no-privileges",
      "--single-transaction",
      "--exit-on-error",
      ...(clean ? ["--clean", "--if-exists"] : []),
      "--dbname",
      split(url).url,
      file,
    ],
    url,
  );
}

/** One value from a query (psql, unaligned, no headers). */
async function pgValue(url: string, sql: string): Promise<string> {
  return (
    await pgTool(
      "psql",
      ["--no-psqlrc", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql, "--dbname", split(url).url],
      url,
    )
  ).trim();
}

export async function pgSchemaVersion(url: string): Promise<string> {
  const v = await pgValue(url, "SELECT max(name) FROM kysely_migration");
  if (!v)
    throw new BerthError(
      "failed_precondition",
      "the PostgreSQL store holds no berth schema (no migration applied)",
    );
  return v;
}

/** Tables in the database's public schema: a restore target must have none (or --force). */
export async function pgTableCount(url: string): Promise<number> {
  return Number(
    await pgValue(url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"),
  );
}
