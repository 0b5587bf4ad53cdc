// The real `berth` CLI as a child process, against a RecordingCoordinator.

import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "../helpers/env.ts";
import { RecordingCoordinator } from "./recording-coordinator.ts";

// The `berth` executable itself: it finds tsx next to it, whatever the working directory.
const CLI_BIN = fileURLToPath(new URL("../../cli/bin.js", import.meta.url));

type Hooks = { after: (fn: () => unknown) => void };

export interface CliEnv {
  api: RecordingCoordinator;
  env: NodeJS.ProcessEnv;
  /** The CLI's TMPDIR: describe's archives go here and must not stay. */
  tmp: string;
  /** Where the test writes its apps. */
  dir: string;
}

export async function cliEnv(t: Hooks): Promise<CliEnv> {
  const api = await new RecordingCoordinator("tok-cli-test").start();
  t.after(() => api.stop());
  const home = tempDir(t, "berth-cli-home-");
  const tmp = join(home, "tmp");
  mkdirSync(tmp);
  const dir = tempDir(t, "berth-cli-app-");
  return {
    api,
    tmp,
    dir,
    env: { HOME: home, TMPDIR: tmp, SERVICE_TOKEN: api.token, BERTH_URL: api.url, BERTH_PROFILE: "" },
  };
}

export function writeApp(dir: string, body: string, file = "app.py"): string {
  writeFileSync(join(dir, file), body);
  return join(dir, file);
}

export const ENDPOINT_APP = `from berth import endpoint

@endpoint
def hello(name: str = "world"):
    return {"hello": name}
`;

export interface CliRun {
  child: ChildProcess;
  output(): { stdout: string; stderr: string };
  exited: Promise<number | null>;
}

export function spawnCli(t: Hooks, args: string[], c: CliEnv, cwd = c.dir): CliRun {
  const child = spawn(process.execPath, [CLI_BIN, ...args], {
    cwd,
    env: { ...process.env, ...c.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const timer = setTimeout(() => child.kill("SIGKILL"), 90_000);
  void exited.then(() => clearTimeout(timer));
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
  });
  return { child, output: () => ({ stdout, stderr }), exited };
}

export async function runCli(t: Hooks, args: string[], c: CliEnv, cwd = c.dir) {
  const r = spawnCli(t, args, c, cwd);
  const code = await r.exited;
  return { code, ...r.output() };
}
