import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { freePort, waitFor } from "../../shared/net.ts";
import { CLI_MAIN, runCli } from "../helpers/cluster.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { bearer } from "../helpers/auth.ts";

interface UpRun {
  pid: number;
  output: () => string;
  exited: Promise<number | null>;
  /** Ctrl-C: SIGINT to the whole process group, as a terminal does. */
  interrupt(): void;
}

function startUp(t: { after: (fn: () => unknown) => void }, args: string[], env: NodeJS.ProcessEnv): UpRun {
  const child = spawn(process.execPath, ["--import", "tsx", CLI_MAIN, "up", ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true, // its own process group, like a terminal's foreground job
  });
  let out = "";
  for (const s of [child.stdout, child.stderr])
    if (s) createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  const pid = child.pid as number;
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {}
      await exited;
    }
  });
  return { pid, output: () => out, exited, interrupt: () => process.kill(-pid, "SIGINT") };
}

const SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));

async function runPython(code: string, env: NodeJS.ProcessEnv): Promise<string> {
  const { stdout } = await promisify(execFile)("python3", ["-c", code], {
    env: { ...process.env, ...env },
    timeout: 30_000,
  });
  return stdout;
}

const field = (out: string, name: string) => new RegExp(`${name}:\\s+(\\S+)`).exec(out)?.[1];

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

test("berth up: a whole cluster in the foreground, a working profile, clean Ctrl-C, data reused", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const home = tempDir(t, "berth-home-");
  const dataDir = join(home, "data");
  const [port, natsPort, grpcPort] = [await freePort(), await freePort(), await freePort()];
  const args = [
    ...[
      "--data-dir",
      dataDir,
      "--port",
      String(port),
      "--nats-port",
      String(natsPort),
      "--grpc-port",
      String(grpcPort),
    ],
    "--no-containers",
  ];
  const env = { HOME: home, SERVICE_TOKEN: "", BERTH_URL: "", BERTH_PROFILE: "", BERTH_AGENT_SOCKET: "" };

  const first = startUp(t, args, env);
  await waitFor(() => first.output().includes("Press Ctrl-C to stop."), {
    timeoutMs: 120_000,
    what: "berth up to be ready",
  }).catch((e) => {
    throw new Error(`${e.message}; its output:\n${first.output()}`);
  });
  const url = field(first.output(), "URL");
  const token = field(first.output(), "admin token");
  assert.equal(url, `http://127.0.0.1:${port}`);
  assert.match(token ?? "", /^bt_/);

  // The curl of the README.
  const r = await fetch(`${url}/api/v1/workspace/current`, { headers: bearer(token!) });
  assert.equal(r.status, 200);
  assert.equal(((await r.json()) as { name: string }).name, "default");

  // The CLI works right away through the saved default profile.
  const cfg = JSON.parse(readFileSync(join(home, ".berth", "config.json"), "utf8"));
  assert.deepEqual(cfg.profiles.default, { url, token, agentSocket: join(dataDir, "agent", "agent.sock") });
  const list = await runCli(["agent", "list", "--json"], env);
  assert.equal(list.code, 0, list.stderr);
  const agents = JSON.parse(list.stdout) as {
    id: string;
    state: string;
    capacity: { cpu_cores: number; memory_bytes: number };
  }[];
  assert.equal(agents.length, 1);
  assert.equal(agents[0]?.state, "ready");
  assert.equal(agents[0]?.capacity.cpu_cores, cpus().length);
  assert.equal(agents[0]?.capacity.memory_bytes, totalmem());
  const agentId = agents[0]?.id;

  // `berth agent ...` with no socket given reaches the agent of `berth up` (saved in the profile): the
  // answer is that agent's own (containers are off here), not "no agent socket".
  const ps = await runCli(["agent", "ps"], env);
  assert.equal(ps.code, 1);
  assert.match(ps.stderr, /containers are disabled on this agent \(--no-containers\)/);

  // ... and so does the Python SDK.
  const sdk = await runPython("from berth import Client; print(Client().current_workspace()['name'])", {
    ...env,
    PYTHONPATH: SDK_DIR,
  });
  assert.equal(sdk.trim(), "default");

  // Ctrl-C stops everything: the process group is empty afterwards.
  first.interrupt();
  assert.equal(await first.exited, 0, first.output());
  await waitFor(() => !groupAlive(first.pid), { timeoutMs: 20_000, what: "every child of berth up to exit" });
  assert.match(first.output(), /berth up: stopped/);
  assert.ok(existsSync(join(dataDir, "coordinator", "berth.db")));

  // A second start reuses the data: same token, same agent.
  const second = startUp(t, args, env);
  await waitFor(() => second.output().includes("Press Ctrl-C to stop."), {
    timeoutMs: 120_000,
    what: "berth up to be ready again",
  });
  assert.equal(field(second.output(), "admin token"), token);
  const again = await runCli(["agent", "list", "--json"], env);
  const ids = (JSON.parse(again.stdout) as { id: string }[]).map((a) => a.id);
  assert.deepEqual(ids, [agentId]);
  second.interrupt();
  assert.equal(await second.exited, 0, second.output());
  await waitFor(() => !groupAlive(second.pid), { timeoutMs: 20_000, what: "every child to exit" });
});
