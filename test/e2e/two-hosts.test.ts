// Two hosts: A runs `berth up --advertise` on its address of a link to B, a
// network namespace with its own veth (its own host as far as addresses go).
// B runs the join command A printed (`berth agent` with those flags, in the
// foreground) with its own data dir, network names and subnets, and pool
// "b": it joins over HTTPS checked by the CA fingerprint, gets NATS (TLS)
// and the registry from the coordinator, a function of pool "b" runs on it,
// and one whose image A built comes to B from the registry on A's address. The join token is revoked; B restarts and resumes, ready again. B is
// revoked: it loses NATS, and a restart is refused.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { waitFor } from "../../shared/net.ts";
import { startBerthUp, UP_COMMANDS } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { hostB, joinFlags, startAgentB } from "../helpers/host-b.ts";
import { testRootfs } from "../helpers/rootfs.ts";
import { randomPort, Teardown, testNames } from "../network/helpers.ts";
const UP_PYTHON_IMAGE = "berth-up/python:latest";

const APP = `
import sys
from berth import Image, function

@function(cpu="100m", memory="100Mi", pool="b")
def on_b(x):
    # The container's own address (a UDP connect sends nothing): B's containers are in B's subnet.
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("192.0.2.1", 9))
    return f"{x * 2} from {s.getsockname()[0]}"

# Built on A (pool default), pushed to the cluster registry on A's address; B pulls it from there.
built_on_a = Image(pool="default").add_commands(["echo built-on-a > /built.txt"])

@function(cpu="100m", memory="100Mi", pool="b", image=built_on_a)
def from_registry():
    with open("/built.txt") as f:
        return f.read().strip()

if __name__ == "__main__":
    if sys.argv[1] == "registry":
        print("from_registry:", from_registry())
    else:
        print("on_b:", on_b(int(sys.argv[1])))
`;

interface AgentRow {
  id: string;
  hostname: string;
  state: string;
  pool?: string;
  last_seen_at: string | null;
}

test("a host in its own namespace joins berth up --advertise, runs a function, resumes, is revoked", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "nsenter", "unshare"] })) return;
  const td = new Teardown(t);
  const b = await testNames();
  const { ns, addrA, addrB } = await hostB(td, b);
  const up = await startBerthUp(td, ["--advertise", addrA]);

  // The command A printed for other hosts: coordinator on A's address over HTTPS, CA fingerprint.
  const flags = joinFlags(up.output());
  assert.equal(flags[1], `https://${addrA}:${new URL(up.url).port}`);

  // Nothing is served on A's address without TLS: the API answers HTTPS only there.
  await assert.rejects(fetch(`http://${addrA}:${new URL(up.url).port}/healthz`));

  const dataB = mkdtempSync(join(tmpdir(), "berth-host-b-"));
  td.defer(() => rmSync(dataB, { recursive: true, force: true }));
  const hold = mkdtempSync(join(tmpdir(), "berth-host-b-cgroup-"));
  td.defer(() => rmSync(hold, { recursive: true, force: true }));
  const grpcPort = randomPort();
  const agentArgs = [
    ...flags,
    ...["--data-dir", dataB, "--hostname", `${b.namePrefix}-host-b`, "--pool", "b"],
    ...["--grpc-host", addrB, "--grpc-port", String(grpcPort), "--advertise", `${addrB}:${grpcPort}`],
    ...["--network-prefix", b.namePrefix, "--subnet4", b.subnet4, "--subnet6", b.subnet6],
    ...["--default-image", UP_PYTHON_IMAGE, "--volume-root", join(dataB, "volumes")],
  ];
  // Runner containers B started are stopped through it before it goes (teardown runs last-in first).
  const stopContainers = async () => {
    const sock = join(dataB, "agent.sock");
    const ps = await up.cli(["agent", "ps", "--all", "--json", "--socket", sock]);
    if (ps.code !== 0) return;
    for (const row of JSON.parse(ps.stdout) as { id: string }[])
      await up.cli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, row.id]);
  };
  const agents = async (): Promise<AgentRow[]> =>
    ((await (await up.api("/api/v1/agents")).json()) as { agents: AgentRow[] }).agents;
  const hostBRow = async () => (await agents()).find((a) => a.hostname === `${b.namePrefix}-host-b`);

  let agent = startAgentB(td, ns, hold, agentArgs);
  td.defer(stopContainers);
  await waitFor(async () => (await hostBRow())?.state === "ready", {
    timeoutMs: 120_000,
    intervalMs: 300,
    what: `host B's agent to be ready; its output:\n${agent.output()}`,
  });
  const id = (await hostBRow())?.id as string;
  const identity = JSON.parse(readFileSync(join(dataB, "identity.json"), "utf8")) as {
    nats: { url: string };
    registry?: { url: string };
  };
  // NATS and the registry as the coordinator handed them over: on A's address, over TLS.
  assert.equal(identity.nats.url, `tls://${addrA}:${/tls:\/\/[^:]+:(\d+)/.exec(up.output())?.[1]}`);
  assert.match(identity.registry?.url ?? "", new RegExp(`^https://${addrA.replaceAll(".", "\\.")}:\\d+$`));

  // B has the default image berth up gave its own agent (an operator imports or pulls it the same way).
  const imported = await up.cli([
    "agent",
    "import",
    "--socket",
    join(dataB, "agent.sock"),
    "--kind",
    "rootfs",
    "--name",
    UP_PYTHON_IMAGE,
    await testRootfs(),
  ]);
  assert.equal(imported.code, 0, imported.stderr);

  // A function of pool "b" runs on B, the one agent in that pool.
  writeFileSync(join(up.appDir, "app.py"), APP);
  const onBSubnet = `from ${b.subnet4.replace(/\.0\/24$/, ".").replaceAll(".", "\\.")}\\d+`;
  assert.match(await up.python(["app.py", "21"]), new RegExp(`on_b: 42 ${onBSubnet}`));
  // An image built on A reaches B through the registry on A's address (TLS, the credentials from the join).
  assert.match(await up.python(["app.py", "registry"], 600_000), /from_registry: built-on-a/);
  const images = await up.cli(["agent", "images", "--json", "--socket", join(dataB, "agent.sock")]);
  assert.equal(images.code, 0, images.stderr);
  assert.match(images.stdout, new RegExp(`${addrA.replaceAll(".", "\\.")}:\\d+/berth/`));

  // The join token is revoked; B, restarted with it still on its command line, resumes as itself.
  const tokens = (await (await up.api("/api/v1/join-token")).json()) as {
    join_tokens: { id: string; revoked_at: string | null }[];
  };
  for (const jt of tokens.join_tokens.filter((j) => !j.revoked_at)) {
    const r = await up.cli(["agent", "join-token", "revoke", jt.id]);
    assert.equal(r.code, 0, r.stderr);
  }
  await stopContainers();
  process.kill(-(agent.child.pid as number), "SIGTERM");
  await agent.exited;
  const restartedAt = Date.now();
  agent = startAgentB(td, ns, hold, agentArgs);
  await waitFor(
    async () => {
      const row = await hostBRow();
      return row?.state === "ready" && Date.parse(row.last_seen_at ?? "") > restartedAt;
    },
    { timeoutMs: 120_000, intervalMs: 300, what: `host B to be ready again; its output:\n${agent.output()}` },
  );
  assert.equal((await hostBRow())?.id, id);
  assert.match(agent.output(), /resumed as/);
  assert.match(await up.python(["app.py", "5"]), new RegExp(`on_b: 10 ${onBSubnet}`));

  // B is revoked: it is cut off from NATS at once, and its next start is refused.
  const revoked = await up.cli(["agent", "revoke", id]);
  assert.equal(revoked.code, 0, revoked.stderr);
  await waitFor(() => agent.output().includes("lost NATS"), {
    timeoutMs: 60_000,
    what: `the revoked host B to lose NATS; its output:\n${agent.output()}`,
  });
  assert.equal((await hostBRow())?.state, "left");
  await stopContainers();
  process.kill(-(agent.child.pid as number), "SIGTERM");
  await agent.exited;
  const refused = startAgentB(td, ns, hold, agentArgs);
  assert.notEqual(await refused.exited, 0);
  assert.match(refused.output(), /revoked/);
});
