// The edge commands as commander parses them, talking over a real unix
// socket to a real agent RPC server whose container half is the in-memory
// fake (the transport is real; the containers are not: see the e2e test).

import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { after, before, test } from "node:test";
import { Command } from "commander";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import type { ContainerStatus, RunContainerRequest } from "../../api/index.ts";
import { type AgentRpcServer, startAgentRpcServer } from "../../agent/rpc/server.ts";
import { agentEdgeCommands } from "../../cli/commands/agent-edge.ts";
import { checkAgentSocket, type EdgeIo } from "../../cli/edge/io.ts";
import { BerthError } from "../../shared/errors.ts";
import { FakeAgent } from "../rpc/fake-agent.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { SAMPLE_STATUS_DEFAULTS, sampleImage, sampleStatus } from "../helpers/wire-samples.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";

/** Plays a container's life when it is run: log lines, then the end. */
class ScriptedContainers extends FakeContainerApi {
  script?: { lines: [stream: "stdout" | "stderr", line: string][]; end: Partial<ContainerStatus> };

  override async runContainer(req: RunContainerRequest): Promise<ContainerStatus> {
    const s = await super.runContainer(req);
    const script = this.script;
    if (script) {
      setTimeout(() => {
        for (const [stream, line] of script.lines) this.appendLog(s.id, stream, line);
        this.containers.set(s.id, { ...s, state: "stopped", exitedAt: s.createdAt + 1, ...script.end });
        this.endLogs(s.id);
      }, 20);
    }
    return s;
  }
}

let dir: string;
let socket: string;
let server: AgentRpcServer;
const fake = new ScriptedContainers({
  scripted: true,
  statusDefaults: SAMPLE_STATUS_DEFAULTS,
  defaultImage: "berth-default",
});

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "berth-edge-cli-"));
  socket = join(dir, "agent.sock");
  server = await startAgentRpcServer({ impl: new FakeAgent(), containers: fake, unixSocket: socket });
});
after(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

function sink(): PassThrough & { text(): string } {
  const chunks: Buffer[] = [];
  const s = new PassThrough() as PassThrough & { text(): string };
  s.on("data", (c: Buffer) => chunks.push(c));
  s.text = () => Buffer.concat(chunks).toString();
  return s;
}

/** Runs `berth <argv>` in-process; returns what it printed and its exit code. */
async function berth(argv: string[], opts: { stdin?: string; env?: NodeJS.ProcessEnv } = {}) {
  const stdout = sink();
  const stderr = sink();
  const stdin = new PassThrough();
  const connected: string[] = [];
  let exitCode = 0;
  const io: EdgeIo = {
    async connect(path) {
      connected.push(path);
      await checkAgentSocket(path);
      return new AgentRpcClient({ address: `unix://${path}` });
    },
    stdout,
    stderr,
    stdin,
    env: opts.env ?? { BERTH_AGENT_SOCKET: socket },
    setExitCode: (c) => {
      exitCode = c;
    },
    signals: new EventEmitter(),
  };
  const program = new Command("berth")
    .exitOverride()
    .configureOutput({ writeErr: () => {}, writeOut: () => {} });
  const agent = program
    .command("agent")
    .option("--data-dir <dir>", "agent state directory", "/var/lib/berth-agent");
  agentEdgeCommands(agent, io);
  if (opts.stdin !== undefined) stdin.end(opts.stdin);
  let error: unknown;
  await program.parseAsync(argv, { from: "user" }).catch((e: unknown) => {
    error = e;
  });
  return { stdout: stdout.text(), stderr: stderr.text(), exitCode, error, connected };
}

test("run --detach sends every flag, keeps options after `--` for the command, prints the id", async () => {
  const r = await berth([
    "agent",
    "run",
    "--memory",
    "64Mi",
    "--cpu",
    "0.5",
    "--gpus",
    "1",
    "--gpu-type",
    "H100,A100",
    "-e",
    "A=1",
    "--env",
    "B=x=y",
    "--name",
    "ctr-det",
    "--label",
    "app=web",
    "--allow",
    "10.0.0.0/8",
    "--allow",
    "192.168.1.0/24",
    "-p",
    "8080",
    "--timeout",
    "60",
    "--detach",
    "python:3.12",
    "--",
    "python",
    "-c",
    "print(1)",
    "--verbose",
  ]);
  assert.equal(r.error, undefined);
  assert.equal(r.stdout, "ctr-det\n");
  assert.deepEqual(r.connected, [socket]);
  assert.deepEqual(fake.lastCall("runContainer"), [
    {
      image: "python:3.12",
      args: ["python", "-c", "print(1)", "--verbose"],
      cpu: 0.5,
      memoryBytes: 64 * 2 ** 20,
      id: "ctr-det",
      env: { A: "1", B: "x=y" },
      labels: { app: "web" },
      gpu: { count: 1, types: ["H100", "A100"] },
      egress: { mode: "allow", cidrs: ["10.0.0.0/8", "192.168.1.0/24"] },
      exposedPorts: [8080],
      timeoutMs: 60_000,
    },
  ]);
});

test("run without `--` refuses an option meant for the command", async () => {
  const before = fake.calls.length;
  const r = await berth(["agent", "run", "--detach", "python:3.12", "python", "-c", "print(1)"]);
  assert.match(String((r.error as Error)?.message), /unknown option '-c'/);
  assert.equal(fake.calls.length, before);
});

test("attached run: stdout and stderr lines apart, then the container's exit code", async () => {
  fake.script = {
    lines: [
      ["stdout", "hello"],
      ["stderr", "warning: x"],
      ["stdout", "done"],
    ],
    end: { exitCode: 3, reason: "exited" },
  };
  try {
    const r = await berth(["agent", "run", "--name", "ctr-att", "alpine", "--", "sh", "-c", "true"]);
    assert.equal(r.error, undefined);
    assert.equal(r.stdout, "hello\ndone\n");
    assert.equal(r.stderr, "warning: x\n");
    assert.equal(r.exitCode, 3);
  } finally {
    fake.script = undefined;
  }
});

test("attached run of an OOM-killed container says so and exits 137; --rm removes it", async () => {
  fake.script = { lines: [["stdout", "allocating"]], end: { exitCode: 137, reason: "oom_killed" } };
  try {
    const r = await berth(["agent", "run", "--rm", "--memory", "64Mi", "--name", "ctr-oom", "alpine"]);
    assert.equal(r.error, undefined);
    assert.equal(r.stdout, "allocating\n");
    assert.equal(r.stderr, "berth: container ctr-oom was OOM-killed (memory limit 64 MiB)\n");
    assert.equal(r.exitCode, 137);
    assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-oom", { remove: true }]);
    assert.equal(fake.containers.has("ctr-oom"), false);
  } finally {
    fake.script = undefined;
  }
});

test("exec streams output and exits with the command's code; -i forwards stdin", async () => {
  fake.containers.set("ctr-e", sampleStatus("ctr-e"));
  const r = await berth(["agent", "exec", "ctr-e", "--", "exit", "3", "partial"]);
  assert.equal(r.error, undefined);
  assert.equal(r.stdout, "partial");
  assert.equal(r.stderr, "bye\n");
  assert.equal(r.exitCode, 3);

  const i = await berth(["agent", "exec", "-i", "-e", "X=1", "ctr-e", "--", "upper"], {
    stdin: "hello edge\n",
  });
  assert.equal(i.error, undefined);
  assert.equal(i.stdout, "HELLO EDGE\n");
  assert.equal(i.exitCode, 0);
  assert.deepEqual(fake.lastCall("exec"), ["ctr-e", { args: ["upper"], env: { X: "1" } }]);
});

test("logs --tail prints lines by stream", async () => {
  fake.containers.set("ctr-l", sampleStatus("ctr-l"));
  for (const [s, l] of [
    ["stdout", "one"],
    ["stderr", "two"],
    ["stdout", "three"],
  ] as const)
    fake.appendLog("ctr-l", s, l);
  // tail is per stream (as an agent's spools keep them): the last line of each.
  const r = await berth(["agent", "logs", "--tail", "1", "ctr-l"]);
  assert.equal(r.error, undefined);
  assert.equal(r.stdout, "three\n");
  assert.equal(r.stderr, "two\n");
  assert.deepEqual(fake.lastCall("streamLogs"), ["ctr-l", { follow: false, tail: 1 }]);
});

test("ps, stop, policy", async () => {
  fake.containers.set("ctr-p", sampleStatus("ctr-p"));
  fake.containers.set(
    "ctr-gone",
    sampleStatus("ctr-gone", { state: "stopped", exitCode: 1, reason: "exited" }),
  );
  const ps = await berth(["agent", "ps"]);
  const lines = ps.stdout.trimEnd().split("\n");
  assert.match(lines[0]!, /^ID\s+IMAGE\s+STATE\s+CPU\s+MEMORY\s+CREATED\s+EXIT$/);
  assert.ok(
    lines.some((l) =>
      /^ctr-p\s+docker\.io\/library\/python:3\.12-slim\s+running\s+0\.5\s+64 MiB\s+\d+d ago\s+-$/.test(l),
    ),
  );
  assert.ok(!ps.stdout.includes("ctr-gone"));
  const all = await berth(["agent", "ps", "--all", "--json"]);
  const json = JSON.parse(all.stdout) as ContainerStatus[];
  assert.deepEqual(
    json.find((s) => s.id === "ctr-gone"),
    fake.containers.get("ctr-gone"),
  );

  const stop = await berth(["agent", "stop", "--rm", "--grace", "2.5", "ctr-p"]);
  assert.equal(stop.stdout, "ctr-p\n");
  assert.deepEqual(fake.lastCall("stopContainer"), ["ctr-p", { graceMs: 2500, remove: true }]);

  fake.containers.set("ctr-n", sampleStatus("ctr-n"));
  const block = await berth(["agent", "policy", "ctr-n", "--block-network"]);
  assert.equal(block.stdout, "ctr-n: network blocked\n");
  const allow = await berth(["agent", "policy", "ctr-n", "--allow", "10.0.0.0/8", "--allow", "fd00::/8"]);
  assert.equal(allow.stdout, "ctr-n: allow 10.0.0.0/8, fd00::/8\n");
  assert.deepEqual(fake.lastCall("setNetworkPolicy"), [
    "ctr-n",
    { mode: "allow", cidrs: ["10.0.0.0/8", "fd00::/8"] },
  ]);
  const none = await berth(["agent", "policy", "ctr-n"]);
  assert.match((none.error as Error).message, /give one of --block-network, --allow CIDR or --open/);
  const both = await berth(["agent", "policy", "ctr-n", "--open", "--block-network"]);
  assert.match((both.error as Error).message, /cannot be combined/);
});

test("pull, images, rmi", async () => {
  const pull = await berth(["agent", "pull", "python:3.12-slim"]);
  assert.equal(pull.stdout, "docker.io/library/python:3.12-slim sha256:feedface (4.7 GiB)\n");
  const images = await berth(["agent", "images"]);
  assert.match(images.stdout, /^REF\s+DIGEST\s+SIZE\s+PULLED\s+IN_USE\n/);
  assert.match(
    images.stdout,
    /docker\.io\/library\/python:3\.12-slim\s+feedface\s+4\.7 GiB\s+2024-05-01T12:00:00\.000Z\s+yes/,
  );
  assert.deepEqual(JSON.parse((await berth(["agent", "images", "--json"])).stdout), [sampleImage]);
  const rmi = await berth(["agent", "rmi", "python:3.12-slim"]);
  assert.equal(rmi.stdout, "removed python:3.12-slim\n");
  const again = await berth(["agent", "rmi", "python:3.12-slim"]);
  assert.ok(again.error instanceof BerthError && again.error.code === "not_found");
  fake.images = [sampleImage];
});

test("import sends an absolute path, the name and the kind, and prints the ref and digest", async () => {
  const abs = await berth(["agent", "import", "/srv/app.tar", "--name", "app:1", "--kind", "docker-archive"]);
  assert.equal(abs.error, undefined);
  assert.deepEqual(fake.lastCall("importImage"), [
    { path: "/srv/app.tar", name: "app:1", kind: "docker-archive" },
  ]);
  const imported = fake.images.at(-1)!;
  assert.equal(abs.stdout, `app:1 ${imported.digest} (12 KiB)\n`);

  const rel = await berth(["agent", "import", "images/rootfs", "--name", "base:2"]);
  assert.equal(rel.error, undefined);
  assert.deepEqual(fake.lastCall("importImage"), [
    { path: join(process.cwd(), "images/rootfs"), name: "base:2", kind: "auto" },
  ]);

  const calls = fake.calls.length;
  const badKind = await berth(["agent", "import", "/srv/app.tar", "--name", "app:1", "--kind", "zip"]);
  assert.match(
    (badKind.error as Error).message,
    /--kind "zip" must be one of auto, oci-archive, docker-archive, rootfs/,
  );
  const noName = await berth(["agent", "import", "/srv/app.tar"]);
  assert.match((noName.error as Error).message, /required option '--name <ref>'/);
  assert.equal(fake.calls.length, calls, "refused flags never reach the agent");
  fake.images = [sampleImage];
});

test("gc sends --unused-hours (24 by default) and prints what went and the bytes freed", async () => {
  fake.images = [
    sampleImage,
    {
      ...sampleImage,
      ref: "old:1",
      refs: ["old:1", "old:latest"],
      digest: "sha256:01d",
      sizeBytes: 3 * 2 ** 20,
      inUse: false,
    },
  ];
  const r = await berth(["agent", "gc"]);
  assert.equal(r.error, undefined);
  assert.deepEqual(fake.lastCall("gcImages"), [{ unusedForMs: 24 * 3_600_000 }]);
  assert.equal(r.stdout, "removed sha256:01d (old:1, old:latest)\n1 image removed, 3.0 MiB freed\n");

  const zero = await berth(["agent", "gc", "--unused-hours", "0.5"]);
  assert.deepEqual(fake.lastCall("gcImages"), [{ unusedForMs: 1_800_000 }]);
  assert.equal(zero.stdout, "0 images removed, 0 B freed\n");

  const calls = fake.calls.length;
  const bad = await berth(["agent", "gc", "--unused-hours", "-1"]);
  assert.match((bad.error as Error).message, /--unused-hours "-1" must be a number of hours, 0 or more/);
  assert.equal(fake.calls.length, calls);
  fake.images = [sampleImage];
});

test("the socket comes from --socket, or from `berth agent --data-dir`, with a clear error when absent", async () => {
  const viaDataDir = await berth(["agent", "--data-dir", dir, "ps"], { env: {} });
  assert.deepEqual(viaDataDir.connected, [socket]);
  assert.equal(viaDataDir.error, undefined);
  const after = await berth(["agent", "ps", "--data-dir", dir], { env: {} });
  assert.deepEqual(after.connected, [socket]);

  const missing = join(dir, "nobody.sock");
  const r = await berth(["agent", "ps", "--socket", missing]);
  assert.deepEqual(r.connected, [missing]);
  assert.ok(r.error instanceof BerthError);
  assert.equal(r.error.code, "unavailable");
  assert.match(r.error.message, new RegExp(`^no agent socket at ${missing}: is \`berth agent\` running\\?`));
});

test("the real CLI registers the edge commands under `berth agent`", async () => {
  const { buildProgram } = await import("../../cli/main.ts");
  const agent = buildProgram().commands.find((c) => c.name() === "agent")!;
  const names = agent.commands.map((c) => c.name());
  for (const n of ["run", "ps", "exec", "logs", "stop", "pull", "images", "rmi", "import", "gc", "policy"])
    assert.ok(names.includes(n), n);
});
