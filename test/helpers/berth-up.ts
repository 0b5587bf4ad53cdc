// A real `berth up` cluster (coordinator, agent, nats-server) in a temp home,
// for end-to-end tests: started as a child process group, torn down through
// the test's Teardown (runner containers stopped through the agent first,
// then the cluster, then its network and home).

import { execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { freePort, waitFor } from "../../shared/net.ts";
import type { Teardown } from "../network/helpers.ts";
import { type TestNames, outsideSubnets, testNames } from "../network/helpers.ts";
import { CLI_MAIN, runCli } from "./cluster.ts";
import { unmountLeftovers } from "./mounts.ts";
import { testRootfs } from "./rootfs.ts";
import { bearer } from "./auth.ts";
import { coordinatorPidByConfig } from "./procs.ts";

export const SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));
/** The `berth` executable; runs from any working directory (tsx resolves next to it). */
export const CLI_BIN = fileURLToPath(new URL("../../cli/bin.js", import.meta.url));

export interface BerthUp {
  url: string;
  token: string;
  home: string;
  dataDir: string;
  /** The network names and subnets of this cluster's agent (for an outside namespace: createOutside). */
  names: TestNames;
  /** A directory for the test's Python app. */
  appDir: string;
  /** The environment the CLI and the SDK need (HOME with the profile `berth up` saved, PYTHONPATH). */
  env: NodeJS.ProcessEnv;
  /** Everything `berth up` printed so far. */
  output(): string;
  /** Stops the cluster as Ctrl-C does (its containers first), leaving its data. */
  stop(): Promise<void>;
  /** Starts it again on the same data directory, ports and network names. */
  start(): Promise<void>;
  /** Runs `berth ARGS` in appDir; never rejects. */
  cli(args: string[], timeoutMs?: number): Promise<{ code: number; stdout: string; stderr: string }>;
  /** Runs `python3 ARGS` in appDir (with `moreEnv` over the cluster's env); rejects with both outputs and the cluster's on a failure. */
  python(args: string[], timeoutMs?: number, moreEnv?: Record<string, string>): Promise<string>;
  /** fetch against the coordinator with the admin token. */
  api(path: string, init?: RequestInit): Promise<Response>;
}

export const UP_COMMANDS = [
  "runc",
  "skopeo",
  "umoci",
  "nats-server",
  "ip",
  "nft",
  "python3",
  "debootstrap",
  "docker-registry",
];

/** extraArgs: more `berth up` flags, or a function of the cluster's network names giving them. */
export async function startBerthUp(
  td: Teardown,
  extraArgs: string[] | ((names: TestNames) => string[]) = [],
): Promise<BerthUp> {
  const names = await testNames();
  const home = mkdtempSync(join(tmpdir(), "berth-up-home-"));
  const dataDir = join(home, "data");
  // Last: an agent killed while it removed a container leaves its mounts.
  td.defer(() => {
    unmountLeftovers([home], [join(dataDir, "agent", "containers")]);
    rmSync(home, { recursive: true, force: true });
  });
  const appDir = join(home, "app");
  mkdirSync(appDir);
  const rootfs = await testRootfs();
  const [port, natsPort, grpcPort] = [await freePort(), await freePort(), await freePort()];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    SERVICE_TOKEN: "",
    BERTH_URL: "",
    BERTH_PROFILE: "",
    BERTH_CONFIG: "",
    PYTHONPATH: SDK_DIR,
  };
  td.defer(() => cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: names.namePrefix }).network));
  const argv = [
    ...["--import", "tsx", CLI_MAIN, "up", "--data-dir", dataDir],
    ...["--port", String(port), "--nats-port", String(natsPort), "--grpc-port", String(grpcPort)],
    ...["--network-prefix", names.namePrefix, "--subnet4", names.subnet4, "--subnet6", names.subnet6],
    // The outside namespace (createOutside) stands in for the internet on private addresses.
    ...outsideSubnets(names).flatMap((c) => ["--allow-private", c]),
    ...["--python-rootfs", rootfs, ...(typeof extraArgs === "function" ? extraArgs(names) : extraArgs)],
  ];
  let out = "";
  // The running berth up (undefined once stopped); stop() and start() run it again on the same data.
  let running: { pid: number; exited: Promise<number | null> } | undefined;
  const launch = async () => {
    const child = spawn(process.execPath, argv, {
      env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const from = out.length;
    for (const s of [child.stdout, child.stderr])
      if (s) createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
    const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
    running = { pid: child.pid as number, exited };
    // berth up that stopped (a start-up error) will never be ready: say so at once, not in 300 s.
    let exitCode: number | null | undefined;
    void exited.then((c) => {
      exitCode = c;
    });
    const ready = () => out.slice(from).includes("Press Ctrl-C to stop.");
    await waitFor(() => ready() || exitCode !== undefined, {
      timeoutMs: 300_000,
      what: "berth up to be ready",
    })
      .then(() => {
        if (!ready()) throw new Error(`berth up exited (code ${exitCode}) before it was ready`);
      })
      .catch((e) => {
        throw new Error(`${(e as Error).message}; its output:\n${out}`);
      });
    return out.slice(from);
  };
  const kill = async () => {
    const r = running;
    if (!r) return;
    try {
      process.kill(-r.pid, "SIGKILL");
    } catch {}
    await r.exited;
  };
  td.defer(kill);
  // Stops containers through the agent, then berth up itself (Ctrl-C), as a user would.
  const stop = async () => {
    const r = running;
    if (!r) return;
    const sock = join(dataDir, "agent", "agent.sock");
    const ps = await runCli(["agent", "ps", "--all", "--json", "--socket", sock]);
    if (ps.code === 0) {
      for (const row of JSON.parse(ps.stdout) as { id: string }[])
        await runCli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, row.id]);
    }
    try {
      process.kill(-r.pid, "SIGINT");
    } catch {}
    await Promise.race([r.exited, new Promise((res) => setTimeout(res, 30_000))]);
    await kill();
    running = undefined;
  };
  // Runs before the cluster goes: whatever runner containers are left are stopped through the agent.
  td.defer(stop);
  const first = await launch();
  const url = /URL:\s+(\S+)/.exec(first)?.[1];
  const token = /admin token:\s+(\S+)/.exec(first)?.[1];
  if (!url || !token) throw new Error(`berth up printed no URL or token:\n${out}`);

  const run = (cmd: string, args: string[], timeoutMs: number, moreEnv: Record<string, string> = {}) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        cmd,
        args,
        { cwd: appDir, env: { ...env, ...moreEnv }, timeout: timeoutMs, maxBuffer: 64 << 20 },
        (err, stdout, stderr) => {
          const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
          resolve({ code, stdout, stderr });
        },
      );
    });
  return {
    url,
    token,
    home,
    dataDir,
    names,
    appDir,
    env,
    output: () => out,
    stop,
    async start() {
      if (running) throw new Error("berth up is running already");
      await launch();
    },
    cli: (args, timeoutMs = 240_000) => run(process.execPath, [CLI_BIN, ...args], timeoutMs),
    async python(args, timeoutMs = 240_000, moreEnv = {}) {
      const r = await run("python3", args, timeoutMs, moreEnv);
      if (r.code !== 0)
        throw new Error(
          `python3 ${args.join(" ")} failed (${r.code}):\n${r.stdout}\n${r.stderr}\nberth up:\n${out}`,
        );
      return r.stdout + r.stderr;
    },
    api: (path, init = {}) =>
      fetch(`${url}${path}`, {
        ...init,
        headers: { ...bearer(token), ...((init.headers as Record<string, string>) ?? {}) },
      }),
  };
}

/**
 * Kills the cluster's coordinator (SIGKILL: a crash, nothing flushed) and
 * waits until berth up has started it again and it answers /healthz. Finds
 * the coordinator as the process running `coordinator --config` with this
 * cluster's config file, so no other cluster's is touched.
 */
export async function restartCoordinator(up: BerthUp): Promise<void> {
  const config = join(up.dataDir, "coordinator.json");
  const pidOf = () => coordinatorPidByConfig(config);
  const before = pidOf();
  if (before === undefined) throw new Error(`no coordinator process runs with --config ${config}`);
  const restartsBefore = up.output().split("starting it again").length;
  process.kill(before, "SIGKILL");
  await waitFor(
    async () => {
      if (up.output().split("starting it again").length === restartsBefore) return false;
      const now = pidOf();
      if (now === undefined || now === before) return false;
      const r = await fetch(`${up.url}/healthz`, { signal: AbortSignal.timeout(2000) }).catch(
        () => undefined,
      );
      return r?.ok === true;
    },
    { timeoutMs: 120_000, intervalMs: 200, what: "berth up to start the coordinator again" },
  ).catch((e) => {
    throw new Error(`${(e as Error).message}; berth up's output:\n${up.output()}`);
  });
}
