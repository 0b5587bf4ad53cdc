// Shared by bench/function-latency and bench/map-throughput: a `berth up`
// cluster in a temp home (the test rootfs as its default Python image), the
// Python driver (functions_app.py) run against it, and the one-container-per-call
// reference (`runc run` + python per item).

import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { currentCredentials } from "../../cli/config.ts";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { freePort, waitFor } from "../../shared/net.ts";
import { testRootfs } from "../../test/helpers/rootfs.ts";
import type { Cleanup } from "./cleanup.ts";
import { benchTempDir } from "./fs.ts";
import { exec, mustExec } from "./proc.ts";

const CLI_MAIN = fileURLToPath(new URL("../../cli/main.ts", import.meta.url));
const CLI_BIN = fileURLToPath(new URL("../../cli/bin.js", import.meta.url));
const SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));
const APP = fileURLToPath(new URL("./functions_app.py", import.meta.url));

export interface BenchCluster {
  /** Runs `python3 functions_app.py MODE ARGS` against the cluster; returns its JSON. */
  app<T>(mode: string, args: number[], timeoutMs?: number): Promise<T>;
  /** Runs `berth ARGS` (the CLI, configured for this cluster) in `cwd`; resolves with its stdout. */
  cli(args: string[], cwd: string, timeoutMs?: number): Promise<string>;
  rootfs: string;
  /** `berth up`'s data directory (volumes live under its volumes/). */
  dataDir: string;
  /** The coordinator's base URL and the workspace token `berth up` configured. */
  url: string;
  token: string;
  /** What `berth up` printed so far (its coordinator's and agent's logs). */
  output(): string;
}

/**
 * `second`: a cluster beside the first in the same process (its own network
 * names and subnets), e.g. one agent with pre-warmed runners and one without.
 */
export async function startBenchCluster(
  cleanup: Cleanup,
  o: { warmRunners?: number; second?: boolean } = {},
): Promise<BenchCluster> {
  const home = benchTempDir(cleanup, "berth-bench-fn-");
  const rootfs = await testRootfs();
  const prefix = `${o.second ? "bw" : "bf"}${process.pid % 10000}`;
  const [port, natsPort, grpcPort] = [await freePort(), await freePort(), await freePort()];
  cleanup.add("remove the bench network", () =>
    cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: prefix }).network),
  );
  const env = {
    ...process.env,
    HOME: home,
    SERVICE_TOKEN: "",
    BERTH_URL: "",
    BERTH_PROFILE: "",
    BERTH_CONFIG: "",
  };
  const third = 16 + (process.pid % 200) + (o.second ? 1 : 0);
  const child = spawn(
    process.execPath,
    [
      ...["--import", "tsx", CLI_MAIN, "up", "--data-dir", join(home, "data")],
      ...["--port", String(port), "--nats-port", String(natsPort), "--grpc-port", String(grpcPort)],
      ...["--network-prefix", prefix, "--subnet4", `10.${third}.0.0/24`, "--subnet6", `fd00:b${third}::/64`],
      ...["--python-rootfs", rootfs],
      ...(o.warmRunners ? ["--warm-runners", String(o.warmRunners)] : []),
    ],
    { env, stdio: ["ignore", "pipe", "pipe"], detached: true },
  );
  let out = "";
  for (const s of [child.stdout, child.stderr])
    if (s) createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
  const exited = new Promise((r) => child.once("exit", r));
  cleanup.add("stop berth up", async () => {
    try {
      process.kill(-(child.pid as number), "SIGINT");
    } catch {}
    const t = setTimeout(() => {
      try {
        process.kill(-(child.pid as number), "SIGKILL");
      } catch {}
    }, 30_000);
    await exited;
    clearTimeout(t);
  });
  await waitFor(() => out.includes("Press Ctrl-C to stop."), { timeoutMs: 300_000, what: "berth up" }).catch(
    (e) => {
      throw new Error(`${(e as Error).message}\n${out}`);
    },
  );
  const appDir = join(home, "app");
  mkdirSync(appDir);
  copyFileSync(APP, join(appDir, "functions_app.py"));
  const profile = currentCredentials(env);
  return {
    output: () => out,
    rootfs,
    dataDir: join(home, "data"),
    url: profile.url,
    token: profile.token ?? "",
    async cli(args: string[], cwd: string, timeoutMs = 300_000): Promise<string> {
      const r = await exec(process.execPath, [CLI_BIN, ...args], {
        env: { ...env, PYTHONPATH: SDK_DIR },
        timeoutMs,
        cwd,
      });
      if (r.code !== 0)
        throw new Error(`berth ${args.join(" ")} failed (${r.code}): ${r.stderr.slice(-2000)}`);
      return r.stdout;
    },
    async app<T>(mode: string, args: number[], timeoutMs = 600_000): Promise<T> {
      const r = await exec("python3", ["functions_app.py", mode, ...args.map(String)], {
        env: { ...env, PYTHONPATH: SDK_DIR },
        timeoutMs,
        cwd: appDir,
      });
      if (r.code !== 0)
        throw new Error(`functions_app.py ${mode} failed (${r.code}): ${r.stderr.slice(-2000)}`);
      return JSON.parse(r.stdout.trim().split("\n").pop() as string) as T;
    },
  };
}

/** A runc bundle over the read-only test rootfs whose process is `python3 -c CODE`. */
export async function pythonBundle(cleanup: Cleanup, rootfs: string, code: string): Promise<string> {
  const dir = benchTempDir(cleanup, "berth-bench-runc-py-");
  await mustExec("runc", ["spec", "--bundle", dir]);
  const specPath = join(dir, "config.json");
  const spec = JSON.parse(readFileSync(specPath, "utf8"));
  spec.process.terminal = false;
  spec.process.args = ["python3", "-c", code];
  spec.root = { path: rootfs, readonly: true };
  writeFileSync(specPath, JSON.stringify(spec));
  return dir;
}

/** One `runc run` of the bundle to its end; resolves with the wall time in ms. */
export async function runcOnce(bundle: string, id: string): Promise<number> {
  const r = await exec("runc", ["run", "--bundle", bundle, id], { timeoutMs: 60_000 });
  if (r.code !== 0) {
    await exec("runc", ["delete", "--force", id]);
    throw new Error(`runc run ${id} failed: ${r.stderr.slice(-500)}`);
  }
  return r.ms;
}
