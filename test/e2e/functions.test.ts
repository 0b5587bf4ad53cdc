import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import Database from "better-sqlite3";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { freePort, waitFor } from "../../shared/net.ts";
import { CLI_MAIN, runCli } from "../helpers/cluster.ts";
import { needs } from "../helpers/env.ts";
import { SPEC_TASK_FIELDS } from "../tasks/fixtures.ts";
import { testRootfs } from "../helpers/rootfs.ts";
import { Teardown, testNames } from "../network/helpers.ts";

const SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));
const exec = promisify(execFile);

// The user's file of the issue, plus the retry and timeout cases. Calls sit
// under the main guard: the runner imports this module in the container.
const APP = `
import json, os, sys, time
from berth import function

@function(cpu=1, memory=128)
def square(x):
    return x * x

@function(cpu=0.5, memory=128, retries=2)
def crash_once():
    if os.environ.get("BERTH_TASK_ATTEMPT") == "1":
        print("crashing on attempt 1", flush=True)
        os._exit(1)
    return "survived attempt " + os.environ.get("BERTH_TASK_ATTEMPT", "?")

@function(cpu=0.5, memory=128, timeout=2)
def sleepy():
    time.sleep(60)

@function(cpu=0.5, memory=128)
def shout(word):
    print("remote says", word)
    raise KeyError(word)

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "square":
        print("remote:", square.remote(7))
        print("map:", json.dumps(list(square.map(range(100)))))
    elif case == "crash":
        print("crash:", crash_once.remote())
    elif case == "timeout":
        t0 = time.time()
        try:
            sleepy.remote()
        except Exception as e:
            print("timeout:", type(e).__name__, getattr(e, "task_id", ""), round(time.time() - t0, 1))
    elif case == "error":
        try:
            shout.remote("boo")
        except KeyError as e:
            print("caught:", repr(e))
`;

interface Up {
  output: () => string;
  exited: Promise<number | null>;
  pid: number;
}

function startUp(args: string[], env: NodeJS.ProcessEnv): Up {
  const child = spawn(process.execPath, ["--import", "tsx", CLI_MAIN, "up", ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let out = "";
  for (const s of [child.stdout, child.stderr])
    if (s) createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  return { output: () => out, exited, pid: child.pid as number };
}

test("functions end to end on a berth up cluster: remote, map, retry, timeout, remote errors, task API", async (t) => {
  if (
    !needs(t, {
      root: true,
      commands: ["runc", "skopeo", "umoci", "nats-server", "ip", "nft", "python3", "debootstrap"],
    })
  )
    return;
  const td = new Teardown(t);
  const names = await testNames();
  const home = mkdtempSync(join(tmpdir(), "berth-fn-home-"));
  td.defer(() => rmSync(home, { recursive: true, force: true }));
  const dataDir = join(home, "data");
  const appDir = join(home, "app");
  const rootfs = await testRootfs();
  const [port, natsPort, grpcPort] = [await freePort(), await freePort(), await freePort()];
  const env = { HOME: home, SERVICE_TOKEN: "", BERTH_URL: "", BERTH_PROFILE: "", BERTH_CONFIG: "" };
  td.defer(() => cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: names.namePrefix }).network));
  const up = startUp(
    [
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
      ...["--network-prefix", names.namePrefix, "--subnet4", names.subnet4, "--subnet6", names.subnet6],
      ...["--python-rootfs", rootfs],
    ],
    env,
  );
  td.defer(async () => {
    try {
      process.kill(-up.pid, "SIGKILL");
    } catch {}
    await up.exited;
  });
  // Runs before the cluster goes: whatever runner containers are left are stopped through the agent.
  td.defer(async () => {
    const sock = join(dataDir, "agent", "agent.sock");
    const ps = await runCli(["agent", "ps", "--all", "--json", "--socket", sock]);
    if (ps.code === 0) {
      for (const row of JSON.parse(ps.stdout) as { id: string }[])
        await runCli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, row.id]);
    }
    try {
      process.kill(-up.pid, "SIGINT");
    } catch {}
    await Promise.race([up.exited, new Promise((r) => setTimeout(r, 30_000))]);
  });
  await waitFor(() => up.output().includes("Press Ctrl-C to stop."), {
    timeoutMs: 300_000,
    what: "berth up to be ready",
  }).catch((e) => {
    throw new Error(`${e.message}; its output:\n${up.output()}`);
  });
  const url = /URL:\s+(\S+)/.exec(up.output())?.[1];
  const token = /admin token:\s+(\S+)/.exec(up.output())?.[1];
  assert.ok(url && token, up.output());

  const mk = await exec("mkdir", ["-p", appDir]);
  assert.equal(mk.stderr, "");
  writeFileSync(join(appDir, "app.py"), APP);
  writeFileSync(join(appDir, ".berthignore"), "big.bin\n");
  writeFileSync(join(appDir, "big.bin"), Buffer.alloc(1024));
  const py = async (scenario: string) => {
    try {
      const r = await exec("python3", ["app.py", scenario], {
        cwd: appDir,
        env: { ...process.env, ...env, PYTHONPATH: SDK_DIR },
        timeout: 240_000,
      });
      return r.stdout + r.stderr;
    } catch (e) {
      const err = e as { stdout?: string; stderr?: string; message: string };
      throw new Error(
        `app.py ${scenario} failed: ${err.message}\n${err.stdout}\n${err.stderr}\nberth up:\n${up.output()}`,
      );
    }
  };
  const api = async (path: string) => {
    const r = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${token}` } });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };

  await t.test("square.remote(7) and square.map(range(100))", async () => {
    const out = await py("square");
    assert.match(out, /^remote: 49$/m, out);
    const mapped = JSON.parse(/^map: (.*)$/m.exec(out)?.[1] ?? "null");
    assert.deepEqual(
      mapped,
      Array.from({ length: 100 }, (_, i) => i * i),
    );
  });

  await t.test("a remote exception is raised in the caller with its output printed", async () => {
    const out = await py("error");
    assert.match(out, /remote says boo/);
    assert.match(out, /caught: KeyError\('boo'\)/);
  });

  await t.test(
    "a container crash on attempt 1 is retried and completes; the retry is in the history",
    async () => {
      const out = await py("crash");
      assert.match(out, /crash: survived attempt 2/, out);
      assert.match(out, /crashing on attempt 1/, "the first attempt's output reached the caller");
      // The task's id, from the coordinator's store; its history comes from the REST route.
      const db = new Database(join(dataDir, "coordinator", "berth.db"), { readonly: true });
      const row = db
        .prepare(
          "SELECT t.id FROM tasks t JOIN stubs s ON s.id = t.stub_id WHERE s.name = 'crash_once' ORDER BY t.created_at DESC LIMIT 1",
        )
        .get() as { id: string };
      db.close();
      const ws = (await api("/api/v1/workspace/current")).body.external_id as string;
      const rest = await api(`/api/v1/task/${ws}/${row.id}`);
      assert.equal(rest.body.status, "COMPLETE");
      const history = (rest.body.history as { status: string; attempt: number }[]).map(
        (h) => `${h.status}:${h.attempt}`,
      );
      assert.deepEqual(
        history.slice(-4),
        ["RUNNING:1", "RETRY:1", "RUNNING:2", "COMPLETE:2"],
        history.join(" "),
      );
    },
  );

  let timeoutTaskId = "";
  await t.test("timeout=2 ends TIMEOUT within a few seconds of 2 s", async () => {
    const out = await py("timeout");
    const m = /timeout: TaskTimeoutError (\S+) ([\d.]+)/.exec(out);
    assert.ok(m, out);
    timeoutTaskId = m[1] as string;
    const secs = Number(m[2]);
    assert.ok(secs >= 2 && secs < 30, `ended after ${secs}s`);
  });

  await t.test("the task status API answers the spec's Task shape", async () => {
    const { status, body } = await api(`/v2/task/${timeoutTaskId}/`);
    assert.equal(status, 200, JSON.stringify(body));
    assert.deepEqual(Object.keys(body).sort(), SPEC_TASK_FIELDS);
    assert.equal(body.status, "TIMEOUT");
    const stub = body.stub as Record<string, unknown>;
    const config = JSON.parse(stub.config as string) as { task_policy: { timeout: number } };
    assert.equal(config.task_policy.timeout, 2);
    assert.equal(typeof stub.config_version, "number");
    const ws = (await api("/api/v1/workspace/current")).body.external_id as string;
    const rest = await api(`/api/v1/task/${ws}/${timeoutTaskId}`);
    assert.equal(rest.status, 200);
    assert.ok(
      (rest.body.history as { status: string }[]).some((h) => h.status === "RUNNING"),
      JSON.stringify(rest.body.history),
    );
  });
});
