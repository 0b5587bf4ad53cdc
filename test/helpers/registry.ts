import { type ChildProcess, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import bcrypt from "bcryptjs";
import { freePort, sleep, waitFor } from "../../shared/net.ts";
import { registryConfigYaml } from "../../cli/up/registry-config.ts";
import { tempDir } from "./env.ts";

export interface TestRegistry {
  /** "127.0.0.1:PORT": the registry part of an image reference. */
  host: string;
  port: number;
  /** "http://127.0.0.1:PORT" */
  url: string;
  dir: string;
  auth?: { user: string; password: string };
  stop(): Promise<void>;
}

/**
 * Debian's docker-registry (distribution v2) on a free loopback port, plain
 * HTTP, filesystem storage in a temp dir; with `auth`, htpasswd (bcrypt) auth.
 * Stopped and removed after the suite, pass or fail.
 */
export async function startTestRegistry(
  t: { after: (fn: () => unknown) => void },
  opts: { auth?: { user: string; password: string } } = {},
): Promise<TestRegistry> {
  const dir = tempDir(t, "berth-registry-");
  const port = await freePort();
  const htpasswd = join(dir, "htpasswd");
  if (opts.auth) {
    // distribution's htpasswd accepts bcrypt only.
    const hash = bcrypt.hashSync(opts.auth.password, 10);
    writeFileSync(htpasswd, `${opts.auth.user}:${hash}\n`, { mode: 0o600 });
  }
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    registryConfigYaml({
      port,
      dataDir: join(dir, "data"),
      ...(opts.auth ? { htpasswd: { path: htpasswd, realm: "berth-test" } } : {}),
    }),
  );

  const child = spawn("docker-registry", ["serve", config], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (b: Buffer) => {
    stderr = (stderr + b.toString()).slice(-4000);
  });
  let exited = false;
  child.on("exit", () => {
    exited = true;
  });
  const stop = () => stopChild(child, () => exited);
  t.after(stop);

  const url = `http://127.0.0.1:${port}`;
  try {
    await waitFor(
      async () => {
        if (exited) throw new Error(`docker-registry exited: ${stderr}`);
        const r = await fetch(`${url}/v2/`);
        return r.status === 200 || r.status === 401;
      },
      { timeoutMs: 20_000, intervalMs: 100, what: `docker-registry on ${url}` },
    );
  } catch (e) {
    await stop();
    throw new Error(`${(e as Error).message}\n${stderr}`);
  }
  return { host: `127.0.0.1:${port}`, port, url, dir, ...(opts.auth ? { auth: opts.auth } : {}), stop };
}

async function stopChild(child: ChildProcess, hasExited: () => boolean): Promise<void> {
  if (hasExited() || child.pid === undefined) return;
  child.kill("SIGTERM");
  for (let i = 0; i < 50 && !hasExited(); i++) await sleep(100);
  if (!hasExited()) {
    child.kill("SIGKILL");
    for (let i = 0; i < 50 && !hasExited(); i++) await sleep(100);
  }
}
