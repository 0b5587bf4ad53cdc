import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { waitFor } from "../../shared/net.ts";
import { type CliProcess, runCli, spawnCli } from "../helpers/cluster.ts";
import { needs } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import { testNames } from "../network/helpers.ts";

interface PsRow {
  id: string;
  state: string;
  pid: number;
}

// The edge scenario through the real CLI and a real agent process
// with no coordinator: run, OOM, restart of the agent under a running container.
test("edge agent: berth agent run prints 42, OOM is reported, containers survive an agent restart", async (t) => {
  if (
    !needs(t, {
      root: true,
      commands: ["runc", "skopeo", "umoci", "docker-registry", "ip", "nft", "python3"],
    })
  )
    return;
  const names = await testNames();
  const dataDir = mkdtempSync(join(tmpdir(), "berth-edge-"));
  const agentArgs = [
    "agent",
    "--data-dir",
    dataDir,
    "--grpc-port",
    "0",
    "--network-prefix",
    names.namePrefix,
    "--subnet4",
    names.subnet4,
    "--subnet6",
    names.subnet6,
  ];
  const cli = (args: string[]) => runCli(["agent", "--data-dir", dataDir, ...args]);
  let agent: CliProcess | undefined;
  // t.after hooks run in the order they were added: this one runs first,
  // while the agent still answers.
  t.after(async () => {
    const ps = await cli(["ps", "--all", "--json"]);
    if (ps.code === 0) {
      for (const row of JSON.parse(ps.stdout) as PsRow[]) await cli(["stop", "--rm", "--grace", "1", row.id]);
    }
    await agent?.stop();
    await cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: names.namePrefix }).network);
    rmSync(dataDir, { recursive: true, force: true });
  });
  agent = spawnCli(t, agentArgs);
  const first = agent;
  const registry = await startTestRegistry(t);
  const ref = await pushTestImage(registry);
  const socket = join(dataDir, "agent.sock");
  await waitFor(() => existsSync(socket) && first.output().includes("agent ready"), {
    timeoutMs: 60_000,
    what: "the edge agent's socket",
  }).catch((e) => {
    throw new Error(`${e.message}\n${first.output()}`);
  });

  const hello = await cli(["run", ref, "--", "python3", "-c", "print(42)"]);
  assert.equal(hello.stderr, "");
  assert.equal(hello.stdout, "42\n");
  assert.equal(hello.code, 0);

  const oom = await cli([
    "run",
    "--memory",
    "64Mi",
    ref,
    "--",
    "python3",
    "-c",
    "b = b'x' * (200 * 1024 * 1024)",
  ]);
  assert.equal(oom.code, 137, oom.stderr);
  assert.match(oom.stderr, /OOM-killed \(memory limit 64 MiB\)/);

  const detached = await cli(["run", "--detach", "--name", "ctr-survivor", ref, "--", "sleep", "300"]);
  assert.equal(detached.code, 0, detached.stderr);
  assert.equal(detached.stdout.trim(), "ctr-survivor");
  const before = (JSON.parse((await cli(["ps", "--json"])).stdout) as PsRow[]).find(
    (r) => r.id === "ctr-survivor",
  );
  assert.equal(before?.state, "running");

  // The agent goes away and comes back; the container never notices.
  await first.stop();
  assert.equal(existsSync(socket), false);
  const second = spawnCli(t, agentArgs);
  agent = second;
  await waitFor(() => existsSync(socket) && second.output().includes("agent ready"), {
    timeoutMs: 60_000,
    what: "the restarted agent",
  });
  const after = (JSON.parse((await cli(["ps", "--json"])).stdout) as PsRow[]).find(
    (r) => r.id === "ctr-survivor",
  );
  assert.equal(after?.state, "running");
  assert.equal(after?.pid, before?.pid);
  const ex = await cli(["exec", "ctr-survivor", "--", "python3", "-c", "print('still here')"]);
  assert.equal(ex.stdout, "still here\n");
});
