import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import pino from "pino";
import { type RunningCoordinator, startCoordinator } from "../../coordinator/main.ts";
import { resolveCoordinatorOptions } from "../../coordinator/options.ts";
import { freePort } from "../../shared/net.ts";
import { clusterNatsUsers } from "../../shared/subjects.ts";
import { tempDir } from "./env.ts";
import { startTestNats, type TestNats } from "./nats.ts";

type Hooks = { after: (fn: () => unknown) => void };

export const CLI_MAIN = fileURLToPath(new URL("../../cli/main.ts", import.meta.url));

export interface TestCluster {
  nats: TestNats;
  coordinator: RunningCoordinator;
  url: string;
  adminToken: string;
  joinToken: string;
  dir: string;
}

/** Real nats-server + an in-process coordinator on free loopback ports. */
export async function startTestCluster(
  t: Hooks,
  /** perAgentNats: the coordinator gives each agent its own NATS user (agentNats.usersFile; docs/install.md). */
  opts: { heartbeatIntervalMs?: number; perAgentNats?: boolean } = {},
): Promise<TestCluster> {
  const nats = await startTestNats(t);
  const dir = tempDir(t, "berth-cluster-");
  const port = await freePort();
  const coordinator = await startCoordinator(
    resolveCoordinatorOptions({
      host: "127.0.0.1",
      port,
      dataDir: join(dir, "coordinator"),
      nats: { url: nats.url, user: "coordinator", password: nats.coordinator.password },
      agentNats: {
        url: nats.url,
        user: "agent",
        password: nats.agent.password,
        ...(opts.perAgentNats
          ? {
              usersFile: nats.usersFile,
              pidFile: nats.pidFile,
              staticUsers: clusterNatsUsers({
                coordinatorPassword: nats.coordinator.password,
                agentPassword: nats.agent.password,
              }),
            }
          : {}),
      },
      heartbeatIntervalMs: opts.heartbeatIntervalMs ?? 1000,
    }),
    pino({ level: "silent" }),
  );
  t.after(() => coordinator.stop());
  const read = (f: string) => readFileSync(join(dir, "coordinator", f), "utf8").trim();
  return {
    nats,
    coordinator,
    url: coordinator.url,
    adminToken: read("admin-token"),
    joinToken: read("join-token"),
    dir,
  };
}

export interface CliProcess {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
  /** SIGTERM, then SIGKILL after a grace period; resolves when gone. */
  stop(): Promise<void>;
}

/** Runs `berth ...` (the real CLI) as a child process, killed after the test. */
export function spawnCli(t: Hooks, args: string[], env: NodeJS.ProcessEnv = {}): CliProcess {
  const child = spawn(process.execPath, ["--import", "tsx", CLI_MAIN, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  for (const s of [child.stdout, child.stderr]) {
    if (s) createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
  }
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const k = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(k);
  };
  t.after(stop);
  return { child, output: () => out, exited, stop };
}

/** Runs `berth ...` to completion and returns its exit code and output. */
export async function runCli(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", CLI_MAIN, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  clearTimeout(timer);
  return { code, stdout, stderr };
}

/** Starts `berth agent` joined to the cluster, with its own data dir. */
export async function spawnAgent(
  t: Hooks,
  c: TestCluster,
  name: string,
): Promise<CliProcess & { dataDir: string }> {
  const dataDir = mkdtempSync(join(tmpdir(), `berth-agent-${name}-`));
  const port = await freePort();
  const p = spawnCli(t, [
    "agent",
    "--coordinator",
    c.url,
    "--join-token",
    c.joinToken,
    "--data-dir",
    dataDir,
    "--hostname",
    name,
    "--grpc-host",
    "127.0.0.1",
    "--grpc-port",
    String(port),
    "--advertise",
    `127.0.0.1:${port}`,
    // Fleet tests need no containers; this keeps them off the host's network.
    "--no-containers",
  ]);
  // Registered after spawnCli's own stop, so the agent is gone before its directory.
  t.after(async () => {
    await p.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  return { ...p, dataDir };
}
