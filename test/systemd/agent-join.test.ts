// `berth agent join` (cli/join/unit.ts): the files it writes, the unit's
// command really running an agent that joins a real coordinator, and the
// refusals that leave a host as it was.

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { buildProgram } from "../../cli/main.ts";
import { AGENT_DEBIAN_PACKAGES, missingDebianPackages, NOT_ON_AGENTS } from "../../cli/join/packages.ts";
import { UNIT_NAME, UNIT_TEMPLATE, installAgentUnit } from "../../cli/join/unit.ts";
import { BerthError } from "../../shared/errors.ts";
import { freePort } from "../../shared/net.ts";
import { bearer } from "../helpers/auth.ts";
import { startTestCluster } from "../helpers/cluster.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";

const CLI_BIN = new URL("../../cli/bin.js", import.meta.url).pathname;

async function berth(argv: string[]): Promise<unknown> {
  return buildProgram()
    .configureOutput({ writeErr: () => {}, writeOut: () => {} })
    .parseAsync(argv, { from: "user" })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
}

/** The env file as systemd reads it (KEY=value lines, # comments). */
function readEnvFile(path: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const eq = line.indexOf("=");
    env[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return env;
}

/** ExecStart as systemd runs it: ${VAR} is one word, $VAR unbraced splits into words (none when unset). */
function execStartWords(unit: string, env: Record<string, string>): string[] {
  const line = unit.split("\n").find((l) => l.startsWith("ExecStart="));
  assert.ok(line);
  return line
    .slice("ExecStart=".length)
    .split(/\s+/)
    .flatMap((w) => {
      const braced = /^\$\{(\w+)\}$/.exec(w);
      if (braced) return [env[braced[1]!] ?? ""];
      const bare = /^\$(\w+)$/.exec(w);
      if (bare) return (env[bare[1]!] ?? "").split(/\s+/).filter((x) => x !== "");
      return [w];
    });
}

test("berth agent join writes a root-only agent.env and a unit whose command runs an agent that joins", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const cluster = await startTestCluster(t);
  const dir = tempDir(t, "berth-join-");
  const unitDir = join(dir, "units");
  const envFile = join(dir, "etc", "agent.env");
  const dataDir = join(dir, "agent");
  const grpcPort = await freePort();
  // In the order `berth agent` defines them, as join writes them.
  const flags = [
    ...["--data-dir", dataDir, "--grpc-host", "127.0.0.1", "--grpc-port", String(grpcPort)],
    ...["--advertise", `127.0.0.1:${grpcPort}`, "--no-containers", "--pool", "gpu"],
  ];
  const err = await berth([
    ...["agent", "--coordinator", cluster.url, "join", "--join-token", cluster.joinToken, ...flags],
    ...["--unit-dir", unitDir, "--agent-env", envFile, "--no-start"],
  ]);
  assert.equal(err, undefined);

  assert.equal(statSync(envFile).mode & 0o777, 0o600);
  const env = readEnvFile(envFile);
  assert.deepEqual(env, {
    BERTH_COORDINATOR: cluster.url,
    BERTH_JOIN_TOKEN: cluster.joinToken,
    BERTH_AGENT_ARGS: flags.join(" "),
  });
  const unitPath = join(unitDir, UNIT_NAME);
  assert.equal(statSync(unitPath).mode & 0o777, 0o644);
  const unit = readFileSync(unitPath, "utf8");
  assert.ok(
    unit.includes(
      `\nExecStart=${process.execPath} ${CLI_BIN} agent --coordinator \${BERTH_COORDINATOR} ` +
        // biome-ignore lint/suspicious/noTemplateCurlyInString: systemd's ${VAR}, not a template
        "--join-token ${BERTH_JOIN_TOKEN} --data-dir /var/lib/berth-agent $BERTH_AGENT_ARGS\n",
    ),
    unit,
  );
  assert.ok(unit.includes(`\nEnvironmentFile=${envFile}\n`));
  // Everything else is the packaged unit, line for line.
  const changed = new Set(["ExecStart", "EnvironmentFile", "Documentation"]);
  const keep = (text: string) =>
    text.split("\n").filter((l) => !changed.has(l.split("=")[0]!) && !l.startsWith("# Installed by"));
  assert.deepEqual(keep(unit), keep(readFileSync(UNIT_TEMPLATE, "utf8")));

  if (needs(t, { commands: ["systemd-analyze"] })) {
    const r = spawnSync("systemd-analyze", ["verify", unitPath], { encoding: "utf8" });
    const problems = `${r.stdout}\n${r.stderr}`.split("\n").filter((l) => l.trim() !== "");
    assert.deepEqual(problems, []);
  }

  // The unit's command, run as systemd would run it, starts an agent that joins the coordinator.
  const [cmd, ...args] = execStartWords(unit, env);
  const agent = spawn(cmd!, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  agent.stdout.on("data", (d: Buffer) => (out += d));
  agent.stderr.on("data", (d: Buffer) => (out += d));
  const exited = new Promise((r) => agent.once("exit", r));
  t.after(async () => {
    if (agent.exitCode === null && agent.signalCode === null) {
      agent.kill("SIGTERM");
      await exited;
    }
  });
  const joined = await waitUntil(
    async () => {
      if (agent.exitCode !== null) throw new Error(`the agent exited: ${out}`);
      const r = await fetch(`${cluster.url}/api/v1/agents`, { headers: bearer(cluster.adminToken) });
      const { agents } = (await r.json()) as { agents: { id: string; state: string; pool?: string }[] };
      return agents.find((a) => a.state === "ready");
    },
    { timeoutMs: 60_000, what: `the agent to join; its output:\n${out}` },
  );
  assert.ok(joined);
  assert.ok(
    existsSync(join(dataDir, "identity.json")),
    "the agent keeps its identity in the given --data-dir",
  );
  agent.kill("SIGTERM");
  await exited;
});

test("berth agent join installs the agent's Debian packages: the list is ensure-deps' runtime list less the server's", async (t) => {
  const script = readFileSync(new URL("../../scripts/ensure-deps.sh", import.meta.url), "utf8");
  const runtime = /^runtime_pkgs=\(([^)]*)\)/m.exec(script)?.[1]?.split(/\s+/).filter(Boolean) ?? [];
  assert.ok(runtime.length > 0, "ensure-deps.sh has no runtime_pkgs");
  assert.deepEqual(
    [...AGENT_DEBIAN_PACKAGES, ...NOT_ON_AGENTS].sort(),
    [...runtime].sort(),
    "cli/join/packages.ts and scripts/ensure-deps.sh name the same packages",
  );
  if (!needs(t, { commands: ["dpkg-query"] })) return;
  // This machine ran ensure-deps.sh: nothing of the agent's is missing; an unknown name is.
  assert.deepEqual(await missingDebianPackages(AGENT_DEBIAN_PACKAGES), []);
  assert.deepEqual(await missingDebianPackages(["runc", "berth-no-such-package"]), ["berth-no-such-package"]);

  // The join command berth up --advertise prints: its --ca-fingerprint goes to the unit's agent flags.
  const dir = tempDir(t, "berth-join-deps-");
  const envFile = join(dir, "etc", "agent.env");
  const fingerprint = `sha256:${"ab".repeat(32)}`;
  const lines: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string) => {
    lines.push(String(chunk));
    return true;
  }) as typeof process.stdout.write;
  let err: unknown;
  try {
    err = await berth([
      ...["agent", "join", "--coordinator", "https://10.0.0.5:8420", "--join-token", "bj_x"],
      ...[
        "--ca-fingerprint",
        fingerprint,
        "--unit-dir",
        join(dir, "units"),
        "--agent-env",
        envFile,
        "--no-start",
      ],
    ]);
  } finally {
    process.stdout.write = write;
  }
  assert.equal(err, undefined);
  assert.match(lines.join(""), /the agent's Debian packages are installed/);
  assert.equal(readEnvFile(envFile).BERTH_AGENT_ARGS, `--ca-fingerprint ${fingerprint}`);
});

test("berth agent join refuses before writing anything: no systemd, missing or unsafe values", async (t) => {
  const dir = tempDir(t, "berth-join-refused-");
  const unitDir = join(dir, "units");
  const envFile = join(dir, "etc", "agent.env");
  const written = () => existsSync(unitDir) || existsSync(join(dir, "etc"));
  const settings = { coordinator: "https://berth.example.com", joinToken: "bj_abc", agentArgs: [] };

  await assert.rejects(
    installAgentUnit(settings, {
      unitDir,
      envFile,
      start: true,
      systemdRunDir: join(dir, "no-systemd"),
      log: () => {},
    }),
    (e: unknown) =>
      e instanceof BerthError && e.code === "failed_precondition" && /does not run systemd/.test(e.message),
  );
  assert.equal(written(), false);

  const missing = await berth([
    "agent",
    "--coordinator",
    "https://x",
    "join",
    "--unit-dir",
    unitDir,
    "--no-start",
  ]);
  assert.ok(
    missing instanceof BerthError && /needs --coordinator URL and --join-token TOKEN/.test(missing.message),
  );
  const notUrl = await berth([
    "agent",
    "join",
    "--coordinator",
    "berth.example.com",
    "--join-token",
    "bj_x",
    "--unit-dir",
    unitDir,
    "--agent-env",
    envFile,
    "--no-start",
  ]);
  assert.ok(
    notUrl instanceof BerthError && /--coordinator "berth.example.com" is not a URL/.test(notUrl.message),
  );
  const blank = await berth([
    ...["agent", "--coordinator", "https://x", "--join-token", "bj_x", "--pool", "a b", "join"],
    ...["--unit-dir", unitDir, "--agent-env", envFile, "--no-start"],
  ]);
  assert.ok(blank instanceof BerthError && /"a b" cannot go into/.test(blank.message));
  assert.equal(written(), false);
  assert.deepEqual(readdirSync(dir), []);
});

test("a second berth agent join (an upgrade) keeps agent.env's settings the line does not give", async (t) => {
  const dir = tempDir(t, "berth-join-again-");
  const unitDir = join(dir, "units");
  const envFile = join(dir, "etc", "agent.env");
  const files = ["--unit-dir", unitDir, "--agent-env", envFile, "--no-start"];
  const first = await berth([
    ...["agent", "join", "--coordinator", "https://berth.example.com", "--join-token", "bj_first"],
    ...["--advertise", "10.0.0.7:8421", "--pool", "a100", "--allow-private", "10.1.0.0/16"],
    ...files,
  ]);
  assert.equal(first, undefined);
  const written = readEnvFile(envFile);
  assert.equal(written.BERTH_AGENT_ARGS, "--advertise 10.0.0.7:8421 --allow-private 10.1.0.0/16 --pool a100");

  // The upgrade step: nothing on the line, everything kept (and the unit rewritten for this berth).
  assert.equal(await berth(["agent", "join", ...files]), undefined);
  assert.deepEqual(readEnvFile(envFile), written);
  assert.ok(existsSync(join(unitDir, UNIT_NAME)));

  // A flag given replaces its saved value; the others stay.
  assert.equal(await berth(["agent", "join", "--pool", "h100", ...files]), undefined);
  assert.deepEqual(readEnvFile(envFile), {
    ...written,
    BERTH_AGENT_ARGS: "--advertise 10.0.0.7:8421 --allow-private 10.1.0.0/16 --pool h100",
  });

  // The operator removed the join token after the host joined: a later join keeps it removed.
  const withoutToken = readFileSync(envFile, "utf8").replace(/^BERTH_JOIN_TOKEN=.*$/m, "BERTH_JOIN_TOKEN=");
  writeFileSync(envFile, withoutToken, { mode: 0o600 });
  assert.equal(await berth(["agent", "join", ...files]), undefined);
  assert.equal(readEnvFile(envFile).BERTH_JOIN_TOKEN, "");
  assert.equal(readEnvFile(envFile).BERTH_COORDINATOR, "https://berth.example.com");

  // --replace writes the file from the line alone.
  assert.equal(
    await berth([
      ...["agent", "join", "--coordinator", "https://other.example.com", "--join-token", "bj_second"],
      ...["--replace", ...files],
    ]),
    undefined,
  );
  assert.deepEqual(readEnvFile(envFile), {
    BERTH_COORDINATOR: "https://other.example.com",
    BERTH_JOIN_TOKEN: "bj_second",
  });

  // A saved flag this berth does not know is an error naming it; the files stay as they were.
  writeFileSync(envFile, `${readFileSync(envFile, "utf8")}BERTH_AGENT_ARGS=--gone-flag 1\n`, { mode: 0o600 });
  const before = readFileSync(envFile, "utf8");
  const refused = await berth(["agent", "join", ...files]);
  assert.ok(refused instanceof BerthError && /--gone-flag.*--replace/.test(refused.message), String(refused));
  assert.equal(readFileSync(envFile, "utf8"), before);
});

test("--agent-env works through node's own command line; the old --env-file says what replaced it", async (t) => {
  const dir = tempDir(t, "berth-join-node-");
  const unitDir = join(dir, "units");
  const envFile = join(dir, "etc", "agent.env");
  // Node 20 reads --env-file anywhere on its command line and exits when the file is missing, as it is
  // at a first join: the option berth uses must pass through node untouched.
  const run = spawnSync(
    process.execPath,
    [
      ...[CLI_BIN, "agent", "join", "--coordinator", "https://berth.example.com", "--join-token", "bj_node"],
      ...["--unit-dir", unitDir, "--agent-env", envFile, "--no-start"],
    ],
    { encoding: "utf8" },
  );
  assert.equal(run.status, 0, run.stderr);
  assert.equal(readEnvFile(envFile).BERTH_JOIN_TOKEN, "bj_node");
  assert.ok(existsSync(join(unitDir, UNIT_NAME)));

  const old = await berth(["agent", "join", "--unit-dir", unitDir, "--env-file", envFile, "--no-start"]);
  assert.ok(old instanceof BerthError && /--env-file is now --agent-env/.test(old.message), String(old));
});
