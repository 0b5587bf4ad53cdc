// The cluster registry and image GC, end to end on `berth up`
// clusters through the real SDK and CLI:
// - an image built through one agent runs on a second agent: `berth up`
//   runs docker-registry with generated credentials, the build pushes there,
//   a second agent (joined later, handed the credentials at join) runs a
//   function from the built image and pulls it from the cluster registry;
//   the registry refuses requests without the credentials, and the password
//   is in no log;
// - `berth image rm` deletes the manifest and the agents' copies too;
// - images no deployment uses and unused for `--image-gc-after` are removed:
//   record, registry manifest, agent copy.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { UP_PYTHON_IMAGE } from "../../cli/up/python-image.ts";
import { freePort } from "../../shared/net.ts";
import { type BerthUp, UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { runCli, spawnCli } from "../helpers/cluster.ts";
import { needs } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown, testNames } from "../network/helpers.ts";

const APP = `
import json, os, sys
from berth import Image, function

CPUS = float(os.environ.get("CPUS", "0.25"))
marker = Image().add_commands(["echo built-on-one > /marker.txt"])

def seen():
    return {"marker": open("/marker.txt").read().strip(), "container": os.environ["BERTH_CONTAINER_ID"]}

# Every core of an agent, kept warm: while it is, nothing else fits on that agent.
@function(name="marker_one", image=marker, cpu=CPUS, memory=128, keep_warm_seconds=300)
def marker_one():
    return seen()

# The built image by the reference its record names (the cluster registry's).
@function(name="marker_two", image=Image(base_image=os.environ.get("BUILT_REF") or None), cpu=CPUS, memory=128)
def marker_two():
    return seen()

@function(name="short_lived", image=Image().add_commands(["echo collect-me > /gc.txt"]), cpu=0.25, memory=128, keep_warm_seconds=1)
def short_lived():
    return open("/gc.txt").read().strip()

if __name__ == "__main__":
    fn = {"one": marker_one, "two": marker_two, "gc": short_lived}[sys.argv[1]]
    value = fn.remote()
    print("RESULT " + json.dumps({"value": value, "image_ref": fn.image.image_ref}), flush=True)
`;

interface ImageRow {
  image_id: string;
  status: string;
  ref: string;
  digest: string;
}

const result = (stdout: string) => {
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(line, `no RESULT line in:\n${stdout}`);
  return JSON.parse(line.slice(7)) as unknown;
};

const registryOf = (up: BerthUp) =>
  JSON.parse(readFileSync(join(up.dataDir, "registry", "registry.json"), "utf8")) as {
    port: number;
    username: string;
    password: string;
  };

const basic = (user: string, password: string) => ({
  authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`,
});

async function images(up: BerthUp, ws: string): Promise<ImageRow[]> {
  return ((await (await up.api(`/api/v1/image/${ws}`)).json()) as { images: ImageRow[] }).images;
}

async function workspace(up: BerthUp): Promise<string> {
  return ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string }).external_id;
}

test("an image built through one agent runs on a second agent, pulled from the cluster registry", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const ws = await workspace(up);
  const reg = registryOf(up);
  const registryUrl = `http://127.0.0.1:${reg.port}`;
  const cpus = String(availableParallelism());
  writeFileSync(join(up.appDir, "app.py"), APP);
  const py = async (args: string[], env: Record<string, string> = {}) => {
    const r = await runPython(up, args, { CPUS: cpus, ...env });
    return { out: r, value: (result(r) as { value: { marker: string; container: string } }).value };
  };

  // Built (and run, kept warm on every core) while berth up's agent is the only one.
  const one = await py(["app.py", "one"]);
  assert.equal(one.value.marker, "built-on-one");
  assert.match(one.out, /push 127\.0\.0\.1:\d+\/berth\/[a-z0-9-]+:img-/, one.out);
  assert.match(one.out, /pushed 127\.0\.0\.1:\d+\/berth\//, one.out);
  const built = (await images(up, ws)).find((i) => i.status === "ready");
  assert.ok(built, "the image is listed ready");
  assert.ok(
    built.ref.startsWith(`127.0.0.1:${reg.port}/berth/`) && built.ref.endsWith(`@${built.digest}`),
    `the record names the cluster registry's image: ${built.ref}`,
  );

  await t.test("the cluster registry refuses requests without its credentials", async () => {
    const [repo] = built.ref.slice(`127.0.0.1:${reg.port}/`.length).split("@");
    const manifest = `${registryUrl}/v2/${repo}/manifests/${built.digest}`;
    assert.equal((await fetch(`${registryUrl}/v2/_catalog`)).status, 401);
    assert.equal((await fetch(manifest)).status, 401);
    assert.equal((await fetch(manifest, { headers: basic(reg.username, "not-the-password") })).status, 401);
    const ok = await fetch(manifest, {
      headers: { ...basic(reg.username, reg.password), accept: "application/vnd.oci.image.manifest.v1+json" },
    });
    assert.equal(ok.status, 200);
  });

  // A second agent, joined now: it holds the cluster registry's credentials from its join.
  const names = await testNames();
  const agentDir = mkdtempSync(join(tmpdir(), "berth-agent-reg-"));
  td.defer(() => rmSync(agentDir, { recursive: true, force: true }));
  td.defer(() => cleanupNetworkByPrefix(resolveAgentOptions({ networkPrefix: names.namePrefix }).network));
  const sock = join(agentDir, "agent.sock");
  const port = await freePort();
  const joinToken = readFileSync(join(up.dataDir, "coordinator", "join-token"), "utf8").trim();
  const second = spawnCli({ after: (fn: () => unknown) => td.defer(fn) }, [
    ...["agent", "--coordinator", up.url, "--join-token", joinToken, "--data-dir", agentDir],
    ...["--hostname", "registry-two", "--grpc-host", "127.0.0.1", "--grpc-port", String(port)],
    ...["--advertise", `127.0.0.1:${port}`, "--default-image", UP_PYTHON_IMAGE],
    ...["--network-prefix", names.namePrefix, "--subnet4", names.subnet4, "--subnet6", names.subnet6],
  ]);
  // Runs before the agent stops: its containers go through it.
  td.defer(async () => {
    const ps = await runCli(["agent", "ps", "--all", "--json", "--socket", sock]);
    if (ps.code === 0)
      for (const row of JSON.parse(ps.stdout) as { id: string }[])
        await runCli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, row.id]);
  });
  let secondId = "";
  await waitUntil(
    async () => {
      const { agents } = (await (await up.api("/api/v1/agents")).json()) as {
        agents: { id: string; hostname: string; state: string }[];
      };
      secondId = agents.find((a) => a.hostname === "registry-two" && a.state === "ready")?.id ?? "";
      return secondId !== "";
    },
    { timeoutMs: 60_000, intervalMs: 300, what: "the second agent", describe: () => second.output() },
  );

  await t.test(
    "a function on the second agent runs from the built image, pulled from the registry",
    async () => {
      const cachedBefore = await agentImages(sock);
      assert.ok(!cachedBefore.some((i) => i.digest === built.digest), "the second agent starts without it");
      const two = await py(["app.py", "two"], { BUILT_REF: built.ref });
      assert.equal(two.value.marker, "built-on-one");
      const { containers } = (await (await up.api(`/api/v1/container/${ws}`)).json()) as {
        containers: { id: string; agent_id: string }[];
      };
      const agentOf = (id: string) => containers.find((c) => c.id === id)?.agent_id;
      assert.equal(agentOf(two.value.container), secondId, "it ran on the second agent");
      assert.notEqual(agentOf(one.value.container), secondId, "the build's function ran on the first");
      const cached = await agentImages(sock);
      assert.ok(
        cached.some((i) => i.digest === built.digest && i.refs.includes(built.ref)),
        `the second agent pulled ${built.ref}: ${JSON.stringify(cached)}`,
      );
    },
  );

  await t.test(
    "berth image rm deletes the manifest from the registry and the second agent's copy",
    async () => {
      // Its warm container on agent two would keep the image there (in use): stopped first (the
      // coordinator may be stopping it at the same moment, so a stop may find it gone).
      const running = async () => {
        const ps = await runCli(["agent", "ps", "--all", "--json", "--socket", sock]);
        assert.equal(ps.code, 0, ps.stderr);
        return JSON.parse(ps.stdout) as { id: string }[];
      };
      for (const row of await running())
        await runCli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, row.id]);
      await waitUntil(async () => (await running()).length === 0, {
        timeoutMs: 60_000,
        intervalMs: 300,
        what: "agent two's containers to be gone",
      });
      const rm = await up.cli(["image", "rm", built.image_id]);
      assert.equal(rm.code, 0, rm.stderr);
      const [repo] = built.ref.slice(`127.0.0.1:${reg.port}/`.length).split("@");
      const r = await fetch(`${registryUrl}/v2/${repo}/manifests/${built.digest}`, {
        headers: basic(reg.username, reg.password),
      });
      assert.equal(r.status, 404, "the manifest is gone");
      assert.ok(!(await agentImages(sock)).some((i) => i.digest === built.digest), "agent two dropped it");
      assert.ok(!(await images(up, ws)).some((i) => i.image_id === built.image_id), "the record is gone");
    },
  );

  await t.test("the registry's password is in no log", () => {
    assert.ok(!up.output().includes(reg.password), "berth up's output");
    assert.ok(!second.output().includes(reg.password), "the second agent's output");
  });
});

test("image GC removes an unused image from the records, the registry and the agent", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td, ["--image-gc-after", "2s"]);
  const ws = await workspace(up);
  const reg = registryOf(up);
  const sock = join(up.dataDir, "agent", "agent.sock");
  writeFileSync(join(up.appDir, "app.py"), APP);
  const ran = result(await runPython(up, ["app.py", "gc"])) as { value: string; image_ref: string };
  assert.equal(ran.value, "collect-me");
  // The image as the SDK ran it (the GC may take its record as soon as its container is gone).
  const [repo, digest] = ran.image_ref.slice(`127.0.0.1:${reg.port}/`.length).split("@");
  assert.ok(repo && digest, `the function ran from the cluster registry's image: ${ran.image_ref}`);
  await waitUntil(async () => !(await images(up, ws)).some((i) => i.digest === digest), {
    timeoutMs: 120_000,
    intervalMs: 500,
    what: "the image GC to remove the unused image",
    describe: () => up.output().slice(-3000),
  });
  const r = await fetch(`http://127.0.0.1:${reg.port}/v2/${repo}/manifests/${digest}`, {
    headers: basic(reg.username, reg.password),
  });
  assert.equal(r.status, 404, "the manifest is gone from the registry");
  const cached = await agentImages(sock);
  assert.ok(!cached.some((i) => i.digest === digest), `the agent dropped it: ${JSON.stringify(cached)}`);
  assert.match(up.output(), /image GC: image removed/);
});

async function agentImages(sock: string): Promise<{ digest: string; refs: string[] }[]> {
  const r = await runCli(["agent", "images", "--json", "--socket", sock]);
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as { digest: string; refs: string[] }[];
}

async function runPython(up: BerthUp, args: string[], env: Record<string, string> = {}): Promise<string> {
  const saved = { ...up.env };
  Object.assign(up.env, env);
  try {
    return await up.python(args, 600_000);
  } finally {
    for (const k of Object.keys(env)) {
      if (saved[k] === undefined) delete up.env[k];
      else up.env[k] = saved[k];
    }
  }
}
