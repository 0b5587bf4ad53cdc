import { execFileSync, spawn } from "node:child_process";
import { chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitFor } from "../../shared/net.ts";

import { postgresBinDir } from "../../cli/up/replicas.ts";

export { postgresBinDir };

export interface TestPostgres {
  url: string;
  stop(): Promise<void>;
}

/**
 * A throwaway PostgreSQL server on a free loopback port, its data in a
 * temporary directory. As root it runs as the `postgres` system user, since
 * PostgreSQL refuses to run as root.
 */
export async function startTestPostgres(t: { after: (fn: () => unknown) => void }): Promise<TestPostgres> {
  const bin = postgresBinDir();
  if (!bin)
    throw new Error(
      "PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)",
    );
  const dir = mkdtempSync(join(tmpdir(), "berth-pg-"));
  const asRoot = process.getuid?.() === 0;
  let uid = process.getuid?.() ?? 0;
  let gid = process.getgid?.() ?? 0;
  if (asRoot) {
    uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
    gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
    chownSync(dir, uid, gid);
  }
  const data = join(dir, "data");
  const port = await freePort();
  const opts = asRoot ? { uid, gid } : {};
  execFileSync(join(bin, "initdb"), ["-D", data, "-U", "berth", "--auth=trust", "-E", "UTF8", "--no-sync"], {
    ...opts,
    stdio: "pipe",
  });
  const server = spawn(
    join(bin, "postgres"),
    ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
    { ...opts, stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  server.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-3000);
  });
  const exited = new Promise<void>((r) => server.once("exit", () => r()));
  const stop = async () => {
    if (server.exitCode === null && server.signalCode === null) {
      server.kill("SIGINT"); // fast shutdown
      const kill = setTimeout(() => server.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(kill);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  t.after(stop);
  const url = `postgres://berth@127.0.0.1:${port}/postgres`;
  await waitForPostgres(url, () => {
    if (server.exitCode !== null) throw new Error(`postgres exited: ${stderr}`);
  });
  return { url, stop };
}

/** Waits until a PostgreSQL server accepts a connection at `url` (30 s); `check` may throw to stop waiting. */
export async function waitForPostgres(url: string, check: () => void = () => {}): Promise<void> {
  const pg = (await import("pg")).default;
  await waitFor(
    async () => {
      check();
      const c = new pg.Client({ connectionString: url });
      try {
        await c.connect();
        return true;
      } finally {
        await c.end().catch(() => {});
      }
    },
    { timeoutMs: 30_000, what: "PostgreSQL to accept connections" },
  );
}
