// Volumes and outputs end to end, against a real `berth up`
// cluster plus a second agent on the same machine sharing its volume root
// (the shared-path design; on one host the root is shared trivially): a
// function on one agent writes a file to a Volume, a function on the other
// agent reads it after the first returned (the consistency
// docs/volumes.md states), `berth volume get` downloads it and `berth volume
// put` feeds one in; a pod and a sandbox see the same volume; an Output's
// public URL serves it without a token, 404s after expiry, and the file is
// gone from storage. One cluster for every case.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { UP_PYTHON_IMAGE, importPythonImage } from "../../cli/up/python-image.ts";
import { freePort } from "../../shared/net.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { runCli, spawnCli } from "../helpers/cluster.ts";
import { needs } from "../helpers/env.ts";
import { testRootfs } from "../helpers/rootfs.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown, testNames } from "../network/helpers.ts";

const APP = `
import json, os, sys, time
from berth import Output, Pod, Sandbox, Volume, function

weights = Volume(name="weights", mount_path="./weights")

# Each asks for every core of an agent, so while the writer's container is
# kept warm the reader's cannot be placed beside it: it runs on the other agent.
@function(volumes=[weights], cpu=CPUS, memory=128, keep_warm_seconds=300)
def write(text):
    with open("weights/hello.txt", "w") as f:
        f.write(text)
    return os.environ["BERTH_CONTAINER_ID"]

@function(volumes=[weights], cpu=CPUS, memory=128, keep_warm_seconds=300)
def read():
    with open("/volumes/weights/hello.txt") as f:
        by_name = f.read()
    with open("weights/hello.txt") as f:
        by_path = f.read()
    with open("weights/put.txt") as f:
        put = f.read()
    return {"container": os.environ["BERTH_CONTAINER_ID"], "by_name": by_name, "by_path": by_path, "put": put}

@function(cpu=0.25, memory=128)
def publish(text):
    with open("/tmp/result.txt", "w") as f:
        f.write(text)
    out = Output(path="/tmp/result.txt")
    out.save()
    return {"url": out.public_url(expires=5), "id": out.id, "task": os.environ["BERTH_TASK_ID"]}

def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)

if __name__ == "__main__":
    step = sys.argv[1]
    if step == "write":
        out(container=write.remote(sys.argv[2]))
    elif step == "read":
        out(**read.remote())
    elif step == "publish":
        out(**publish.remote(sys.argv[2]))
    elif step == "pod-sandbox":
        shared = Volume(name="shared", mount_path="./shared")
        pod = Pod(entrypoint=["python3", "-c",
            "open('/volumes/shared/pod.txt', 'w').write('from the pod'); import time; time.sleep(600)"],
            volumes=[shared], cpu=0.25, memory=128).create()
        sb = Sandbox(volumes=[Volume(name="shared", mount_path="/data/shared")], cpu=0.25, memory=128).create()
        seen = ""
        for _ in range(600):
            p = sb.process.exec("cat", "/data/shared/pod.txt")
            if p.wait() == 0:
                seen = p.stdout.read()
                break
            time.sleep(0.1)
        p = sb.process.exec("sh", "-c", "echo from the sandbox > /volumes/shared/sandbox.txt")
        code = p.wait()
        out(pod_ok=pod.ok, seen=seen, write_code=code)
        sb.terminate()
`;

const result = (stdout: string) => {
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(line, `no RESULT line in:\n${stdout}`);
  return JSON.parse(line.slice(7)) as Record<string, unknown>;
};

test("volumes and outputs end to end: two agents share a volume, a pod and a sandbox see it, the CLI moves files, an Output's URL", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const volumeRoot = join(up.dataDir, "volumes");

  // A second agent with containers, its own network names, the same volume root.
  const names = await testNames();
  const agentDir = mkdtempSync(join(tmpdir(), "berth-agent-vol-"));
  td.defer(() => rmSync(agentDir, { recursive: true, force: true }));
  td.defer(() => cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: names.namePrefix }).network));
  const sock = join(agentDir, "agent.sock");
  // Runs before the agent stops: its containers go through it.
  const port = await freePort();
  const joinToken = readFileSync(join(up.dataDir, "coordinator", "join-token"), "utf8").trim();
  const hooks = { after: (fn: () => unknown) => td.defer(fn) };
  const second = spawnCli(hooks, [
    ...["agent", "--coordinator", up.url, "--join-token", joinToken, "--data-dir", agentDir],
    ...["--hostname", "volume-two", "--grpc-host", "127.0.0.1", "--grpc-port", String(port)],
    ...["--advertise", `127.0.0.1:${port}`, "--default-image", UP_PYTHON_IMAGE, "--volume-root", volumeRoot],
    ...["--network-prefix", names.namePrefix, "--subnet4", names.subnet4, "--subnet6", names.subnet6],
  ]);
  td.defer(async () => {
    const ps = await runCli(["agent", "ps", "--all", "--json", "--socket", sock]);
    if (ps.code === 0) {
      for (const row of JSON.parse(ps.stdout) as { id: string }[])
        await runCli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, row.id]);
    }
  });
  const agents = async () =>
    (
      (await (await up.api("/api/v1/agents")).json()) as {
        agents: { id: string; hostname: string; state: string }[];
      }
    ).agents;
  await waitUntil(
    async () => (await agents()).some((a) => a.hostname === "volume-two" && a.state === "ready"),
    {
      timeoutMs: 60_000,
      intervalMs: 300,
      what: "the second agent to be ready",
      describe: () => `its output:\n${second.output()}`,
    },
  );
  await importPythonImage(sock, await testRootfs(), () => {});
  // Every core one agent offers (both agents on this machine report the same).
  writeFileSync(join(up.appDir, "app.py"), APP.replaceAll("CPUS", String(availableParallelism())));
  const py = async (...args: string[]) => result(await up.python(["app.py", ...args]));
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;

  await t.test(
    "a function writes, a function on the other agent reads, berth volume get downloads",
    async () => {
      const local = join(up.appDir, "put.txt");
      writeFileSync(local, "put by the CLI");
      const put = await up.cli(["volume", "put", "weights", local]);
      assert.equal(put.code, 0, put.stderr);
      assert.match(put.stdout, /uploaded .*put\.txt to weights:\/put\.txt \(14 bytes\)/);

      const w = await py("write", "hello from agent one");
      const r = await py("read");
      assert.equal(r.by_name, "hello from agent one");
      assert.equal(r.by_path, "hello from agent one");
      assert.equal(r.put, "put by the CLI");
      const containers = (
        (await (await up.api(`/api/v1/container/${ws}`)).json()) as {
          containers: { id: string; agent_id: string }[];
        }
      ).containers;
      const agentOf = (id: unknown) => containers.find((c) => c.id === id)?.agent_id;
      assert.ok(agentOf(w.container), `the writer ${w.container} is listed: ${JSON.stringify(containers)}`);
      assert.ok(agentOf(r.container), `the reader ${r.container} is listed: ${JSON.stringify(containers)}`);
      assert.notEqual(
        agentOf(w.container),
        agentOf(r.container),
        "writer and reader ran on different agents",
      );

      const get = await up.cli(["volume", "get", "weights", "hello.txt", join(up.appDir, "got.txt")]);
      assert.equal(get.code, 0, get.stderr);
      assert.equal(readFileSync(join(up.appDir, "got.txt"), "utf8"), "hello from agent one");
      const ls = await up.cli(["volume", "ls"]);
      assert.match(ls.stdout, /^weights\s/m);
      const files = await up.cli(["volume", "ls", "weights"]);
      assert.match(files.stdout, /\/hello\.txt/);
      assert.match(files.stdout, /\/put\.txt/);
    },
  );

  await t.test("a pod and a sandbox see the same volume", async () => {
    const r = await py("pod-sandbox");
    assert.equal(r.pod_ok, true);
    assert.equal(r.seen, "from the pod");
    assert.equal(r.write_code, 0);
    const got = await up.api(`/api/v1/volume/${ws}/shared/files/sandbox.txt`);
    assert.equal(await got.text(), "from the sandbox\n");
  });

  await t.test(
    "an Output's public URL serves it without a token, 404s after expiry, and the file is deleted",
    async () => {
      const r = (await py("publish", "published bytes")) as { url: string; id: string; task: string };
      const got = await fetch(r.url);
      assert.equal(got.status, 200);
      assert.equal(await got.text(), "published bytes");
      const v2 = (await (await up.api(`/v2/task/${r.task}/`)).json()) as {
        outputs: { id: string; name: string }[];
      };
      assert.deepEqual(
        v2.outputs.map((o) => [o.id, o.name]),
        [[r.id, "result.txt"]],
      );
      const rest = (await (await up.api(`/api/v1/task/${ws}/${r.task}`)).json()) as {
        outputs: { id: string }[];
      };
      assert.deepEqual(
        rest.outputs.map((o) => o.id),
        [r.id],
      );
      await waitUntil(async () => (await fetch(r.url)).status === 404, {
        what: "the output's URL to expire",
        timeoutMs: 30_000,
        intervalMs: 250,
      });
      const outputsDir = join(up.dataDir, "coordinator", "outputs");
      const stored = () =>
        readdirSync(outputsDir, { recursive: true }).some((f) => String(f).endsWith(`${r.id}.data`));
      await waitUntil(() => !stored(), {
        what: "the sweeper to delete the file",
        timeoutMs: 30_000,
        intervalMs: 250,
      });
      const after = (await (await up.api(`/v2/task/${r.task}/`)).json()) as { outputs: unknown[] };
      assert.deepEqual(after.outputs, []);
    },
  );
});
