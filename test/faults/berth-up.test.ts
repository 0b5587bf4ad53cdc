// Fault cases on one real `berth up` cluster (coordinator, agent, nats-server,
// runc containers), one after the other:
//  - the cluster's only agent is SIGKILLed during a .map() of 2,000 items:
//    berth up starts it again, it re-adopts its runner containers, and the map
//    finishes with every result right, once;
//  - the same with a second agent joined: it takes part of the map while
//    berth up's agent is away and comes back;
//  - a runner that hangs without exiting: each task ends
//    TIMEOUT and its container is killed, every time.
// Each case prints its summary line (test/faults/summary.ts). A container
// that runs out of memory, pids or disk: test/faults/container-limits.test.ts.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { type BerthUp, UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { runCli, spawnCli } from "../helpers/cluster.ts";
import { testRootfs } from "../helpers/rootfs.ts";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { UP_PYTHON_IMAGE, importPythonImage } from "../../cli/up/python-image.ts";
import { freePort } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import { flagValue, pidWhere } from "../helpers/procs.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown, outsideSubnets, testNames } from "../network/helpers.ts";
import { type TaskRow, agentIdOf, agentReady, containers, seen, tasksOf } from "./cluster.ts";
import { type FaultCounts, assertFaultSummary, countDuplicates, tallyTasks } from "./summary.ts";

const MAP_ITEMS = 2000;
/** The agent dies once this many results reached the caller. */
const KILL_AT = 100;

// Calls sit under the main guard: the runner imports this module in the container.
const APP = `
import json, sys, time
from berth import function

@function(cpu=0.25, memory=128, retries=3)
def double(x):
    return {"x": x, "y": 2 * x}

@function(cpu=0.25, memory=128, retries=3)
def triple(x):
    return {"x": x, "y": 3 * x}

@function(cpu=0.25, memory=128, timeout=2, retries=0)
def hang(i):
    # Never returns, never exits (the handler runs off the main thread, so it
    # cannot ignore signals itself): only berth's kill ends it.
    while True:
        time.sleep(3600)

if __name__ == "__main__":
    case = sys.argv[1]
    if case in ("map", "map3"):
        fn = double if case == "map" else triple
        for r in fn.map(range(int(sys.argv[2]))):
            print("r", json.dumps(r), flush=True)
        print("done", flush=True)
    elif case == "hang":
        try:
            hang.remote(int(sys.argv[2]))
            print("hang: returned")
        except Exception as e:
            print("hang:", type(e).__name__, getattr(e, "task_id", ""))
`;

/** The pid of berth up's agent (its command line names the cluster's agent data dir). */
function agentPid(up: BerthUp): number | undefined {
  const want = join(up.dataDir, "agent");
  return pidWhere((argv) => argv.includes("agent") && flagValue(argv, "--data-dir") === want);
}

/** Ids of the containers runc runs for the cluster's agent (read without the agent, which may be dead). */
function runcRunning(up: BerthUp): string[] {
  const agentDir = join(up.dataDir, "agent");
  const root = execFileSync("find", [agentDir, "-maxdepth", "4", "-type", "d", "-name", ".runc"], {
    encoding: "utf8",
  })
    .split("\n")
    .filter(Boolean)[0];
  assert.ok(root, `a runc root under ${agentDir}`);
  const list = JSON.parse(
    execFileSync("runc", ["--root", root, "list", "--format", "json"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    }) || "[]",
  ) as { id: string; status: string }[] | null;
  return (list ?? []).filter((c) => c.status === "running").map((c) => c.id);
}

/** How long the store may lag the results the caller already has (its writes are batched, a failed batch retried). */
const ROWS_SETTLE_MS = 45_000;

/** The stub's task rows once none is still open in the store, or as they are after ROWS_SETTLE_MS. */
async function rowsSettled(up: BerthUp, stubName: string): Promise<{ rows: TaskRow[]; lagMs: number }> {
  const t0 = Date.now();
  for (;;) {
    const rows = tasksOf(up, stubName);
    if (rows.every((r) => r.status === "COMPLETE") || Date.now() - t0 > ROWS_SETTLE_MS)
      return { rows, lagMs: Date.now() - t0 };
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Runs `python3 app.py <pyCase> MAP_ITEMS` (a .map() of stub `stubName`,
 * item i answering {x: i, y: factor * i}), SIGKILLs berth up's agent once
 * KILL_AT results reached the caller, and checks that berth up starts it
 * again, that it re-adopts every runner container runc still ran, and that
 * the map finishes. Returns the stub's tasks (once the store has ended
 * them all), the case's counts and how long the store took to catch up
 * with the caller.
 */
async function mapKillingTheAgent(
  up: BerthUp,
  td: Teardown,
  pyCase: string,
  stubName: string,
  factor: number,
): Promise<{ rows: TaskRow[]; counts: FaultCounts; lagMs: number }> {
  const pid = agentPid(up);
  assert.ok(pid, "berth up's agent process is found");
  const py = spawn("python3", ["app.py", pyCase, String(MAP_ITEMS)], { cwd: up.appDir, env: up.env });
  td.defer(() => {
    if (py.exitCode === null && py.signalCode === null) py.kill("SIGKILL");
  });
  const results: string[] = [];
  let stderr = "";
  let partial = "";
  let atKill = -1;
  py.stdout.on("data", (d: Buffer) => {
    const lines = (partial + d.toString()).split("\n");
    partial = lines.pop() ?? "";
    for (const l of lines) results.push(l);
    // Mid-work, at once (the map is fast): results are coming back, most of the map is still ahead.
    if (atKill < 0 && results.length >= KILL_AT) {
      atKill = results.length;
      process.kill(pid, "SIGKILL");
    }
  });
  py.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((r) => py.once("exit", (c) => r(c)));
  const describe = () =>
    `map output: ${results.length} lines; stderr:\n${stderr.slice(-3000)}\nberth up:\n${up.output().slice(-5000)}`;

  await waitUntil(() => atKill >= 0, {
    what: `the map's first ${KILL_AT} results`,
    timeoutMs: 240_000,
    describe,
  });
  // The runner containers outlive their agent: runc still runs them.
  const runningAtKill = runcRunning(up);
  assert.ok(runningAtKill.length > 0, "runner containers run the map");

  // berth up starts the agent again: a new process, ready again, with the runner containers it left.
  const restarted = await waitUntil(() => (agentPid(up) !== pid ? agentPid(up) : undefined), {
    what: "berth up to start the agent again",
    timeoutMs: 60_000,
    describe,
  });
  assert.notEqual(restarted, pid);
  assert.match(up.output(), /berth up: agent exited unexpectedly \(code null, SIGKILL\); starting it again/);
  await waitUntil(() => agentReady(up), {
    what: "the restarted agent to report in",
    timeoutMs: 120_000,
    describe,
  });
  const after = await waitUntil(() => containers(up), {
    what: "the restarted agent's container list",
    timeoutMs: 60_000,
  });
  const adopted = runningAtKill.filter((id) => after.some((c) => c.id === id));
  assert.deepEqual(adopted, runningAtKill, "the restarted agent knows every runner container it left");

  const code = await exited;
  assert.equal(code, 0, describe());
  assert.ok(atKill < MAP_ITEMS, "the agent was killed before the map finished");
  assert.equal(results.at(-1), "done", describe());
  const values = results
    .filter((l) => l.startsWith("r "))
    .map((l) => JSON.parse(l.slice(2)) as { x: number; y: number });
  const wrong =
    values.filter((v, i) => v.x !== i || v.y !== factor * i).length + Math.max(0, MAP_ITEMS - values.length);
  // The caller gets each result as the coordinator applies it; the rows follow in batched writes.
  const { rows, lagMs } = await rowsSettled(up, stubName);
  const counts = tallyTasks(seen(rows), {
    duplicateResults: countDuplicates(values.map((v) => String(v.x))),
    wrong,
  });
  const open = new Map<string, number>();
  for (const r of rows) if (r.status !== "COMPLETE") open.set(r.status, (open.get(r.status) ?? 0) + 1);
  assert.equal(
    open.size,
    0,
    `every item completed (not: ${[...open].map(([k, n]) => `${k}=${n}`).join(" ")}); berth up's lines on task rows:\n${up
      .output()
      .split("\n")
      .filter((l) => /task rows|ended already|agent.*lost|retry/i.test(l))
      .slice(-40)
      .join("\n")}`,
  );
  return { rows, counts, lagMs };
}

test("fault suite on a berth up cluster: agent SIGKILL mid-map, hung runners", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);

  await t.test(
    `the only agent is SIGKILLed during a .map() of ${MAP_ITEMS} items: the map finishes once it is back`,
    async (st) => {
      const { rows, counts, lagMs } = await mapKillingTheAgent(up, td, "map", "double", 2);
      st.diagnostic(`the store had every row ended ${lagMs} ms after the map returned`);
      assert.equal(rows.length, MAP_ITEMS, "one task per item");
      assertFaultSummary(st, "agent SIGKILL mid-map (only agent of berth up)", counts);
    },
  );

  await t.test(
    "a runner that hangs without exiting: its task times out and its container is killed, every time",
    async (st) => {
      const runs = 3;
      const outs = await Promise.all(
        Array.from({ length: runs }, (_, i) => up.python(["app.py", "hang", String(i)])),
      );
      for (const out of outs) assert.match(out, /^hang: TaskTimeoutError \S+$/m, out);
      const rows = tasksOf(up, "hang");
      assert.equal(rows.length, runs);
      const killed = new Set<string>();
      for (const r of rows) {
        assert.equal(r.status, "TIMEOUT", JSON.stringify(r));
        assert.match(r.error_json ?? "", /its container was killed/);
        assert.ok(r.container_id, "the task names its container");
        killed.add(r.container_id);
        // Killed: stopped, or already removed from the agent's list.
        await waitUntil(
          async () => {
            const list = await containers(up);
            return list && !list.some((c) => c.id === r.container_id && c.state === "running");
          },
          { what: `container ${r.container_id} to be killed`, timeoutMs: 60_000 },
        );
      }
      assert.equal(killed.size, runs, "each hung task had its own container, each killed");
      assertFaultSummary(st, "hung runner times out", tallyTasks(seen(rows)));
    },
  );

  await t.test(
    "with a second agent joined, berth up's agent is SIGKILLed mid-map: the other agent takes work, the map finishes",
    async (st) => {
      const names = await testNames();
      const dir = mkdtempSync(join(tmpdir(), "berth-fault-agent2-"));
      td.defer(() => rmSync(dir, { recursive: true, force: true }));
      td.defer(() =>
        cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: names.namePrefix }).network),
      );
      const joinToken = /join token:\s+(\S+)/.exec(up.output())?.[1];
      assert.ok(joinToken);
      const port = await freePort();
      const agent2 = spawnCli(
        { after: (fn) => td.defer(fn) },
        [
          ...["agent", "--coordinator", up.url, "--join-token", joinToken, "--data-dir", dir],
          ...["--grpc-host", "127.0.0.1", "--grpc-port", String(port), "--advertise", `127.0.0.1:${port}`],
          ...["--volume-root", join(up.dataDir, "volumes"), "--default-image", UP_PYTHON_IMAGE],
          ...["--network-prefix", names.namePrefix, "--subnet4", names.subnet4, "--subnet6", names.subnet6],
          ...outsideSubnets(names).flatMap((c) => ["--allow-private", c]),
        ],
        up.env,
      );
      // Runs before the agent stops: its runner containers go first.
      const sock = join(dir, "agent.sock");
      td.defer(async () => {
        const ps = await runCli(["agent", "ps", "--all", "--json", "--socket", sock], up.env);
        if (ps.code !== 0) return;
        for (const row of JSON.parse(ps.stdout) as { id: string }[])
          await runCli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, row.id], up.env);
      });
      const id2 = await waitUntil(
        async () => {
          if (!existsSync(join(dir, "identity.json"))) return undefined;
          const id = agentIdOf(dir);
          return (await agentReady(up, id)) ? id : undefined;
        },
        { what: "the second agent to report in", timeoutMs: 120_000, describe: () => agent2.output() },
      );
      await importPythonImage(sock, await testRootfs(), () => {});

      const { rows, counts, lagMs } = await mapKillingTheAgent(up, td, "map3", "triple", 3);
      st.diagnostic(`the store had every row ended ${lagMs} ms after the map returned`);
      assert.equal(rows.length, MAP_ITEMS, "one task per item");
      const db = new Database(join(up.dataDir, "coordinator", "berth.db"), { readonly: true });
      const byAgent2 = (
        db
          .prepare(
            "SELECT COUNT(*) AS n FROM tasks t JOIN stubs s ON s.id = t.stub_id WHERE s.name = 'triple' AND t.agent_id = ?",
          )
          .get(id2) as { n: number }
      ).n;
      db.close();
      st.diagnostic(`tasks completed by the second agent: ${byAgent2}`);
      assert.ok(byAgent2 > 0, "the second agent ran part of the map");
      assertFaultSummary(st, "agent SIGKILL mid-map (second agent takes work)", counts);
    },
  );
});
