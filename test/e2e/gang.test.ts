// A gang across two hosts: A runs `berth up --advertise` on its address of a
// link to B, a network namespace with its own agent (test/helpers/host-b.ts).
// A function with nodes=2 runs as one container on each host, joined by the
// gang's own VXLAN network: its ranks run a real torch.distributed all-reduce
// over gloo (Debian's python3-torch, in an image the cluster builds) and the
// task returns rank 0's sum. A container outside the gang reaches neither
// rank. Killing one rank's container ends the gang, and the task's error
// names that rank.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import type { ContainerStatus } from "../../api/index.ts";
import { GangLabels } from "../../shared/gang.ts";
import { waitFor } from "../../shared/net.ts";
import { startBerthUp, UP_COMMANDS } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { hostB, joinFlags, startAgentB } from "../helpers/host-b.ts";
import { testRootfs } from "../helpers/rootfs.ts";
import { randomPort, Teardown, testNames } from "../network/helpers.ts";

const UP_PYTHON_IMAGE = "berth-up/python:latest";

const APP = `
import os, socket, sys, time
from berth import Image, function

# Built on A (pool "default"): B, a namespace, has no route to the package mirror. The gang has no pool: both hosts.
torch_image = Image(pool="default").add_commands([
    "apt-get update -qq",
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch",
])

@function(image=torch_image, nodes=2, cpu=0.5, memory=1024, keep_warm_seconds=120)
def allreduce(x):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(x * (rank + 1))])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return {"sum": t.item(), "world": world, "rank": rank, "master": os.environ["MASTER_ADDR"], "iface": os.environ["GLOO_SOCKET_IFNAME"]}

@function(image=torch_image, nodes=2, cpu=0.5, memory=1024)
def hang(seconds):
    time.sleep(seconds)
    return "slept"

@function(cpu="100m", memory="100Mi")
def probe(addrs):
    out = {}
    for addr in addrs.split(","):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((addr, int(os.environ.get("PROBE_PORT", "29400"))))
            out[addr] = "connected"
        except ConnectionRefusedError:
            out[addr] = "refused"
        except OSError as e:
            out[addr] = type(e).__name__
        finally:
            s.close()
    return out

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "allreduce":
        print("allreduce:", allreduce.remote(int(sys.argv[2])))
    elif case == "probe":
        print("probe:", probe.remote(sys.argv[2]))
    elif case == "hang":
        try:
            print("hang:", hang.remote(600))
        except Exception as e:
            print("hang failed:", type(e).__name__, e)
`;

test("a 2-node gang all-reduces over its own network; outsiders cannot reach it; a killed rank ends it", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "nsenter", "unshare"] })) return;
  const td = new Teardown(t);
  const b = await testNames();
  const { ns, addrA, addrB } = await hostB(td, b);
  const up = await startBerthUp(td, ["--advertise", addrA]);
  const flags = joinFlags(up.output());

  const dataB = mkdtempSync(join(tmpdir(), "berth-gang-b-"));
  td.defer(() => rmSync(dataB, { recursive: true, force: true }));
  const hold = mkdtempSync(join(tmpdir(), "berth-gang-b-cgroup-"));
  td.defer(() => rmSync(hold, { recursive: true, force: true }));
  const grpcPort = randomPort();
  const sockB = join(dataB, "agent.sock");
  const sockA = join(up.dataDir, "agent", "agent.sock");
  const agentB = startAgentB(td, ns, hold, [
    ...flags,
    ...["--data-dir", dataB, "--hostname", `${b.namePrefix}-gang-b`, "--pool", "b"],
    ...["--grpc-host", addrB, "--grpc-port", String(grpcPort), "--advertise", `${addrB}:${grpcPort}`],
    ...["--network-prefix", b.namePrefix, "--subnet4", b.subnet4, "--subnet6", b.subnet6],
    ...["--default-image", UP_PYTHON_IMAGE, "--volume-root", join(dataB, "volumes")],
  ]);
  const containersOn = async (sock: string): Promise<ContainerStatus[]> => {
    const ps = await up.cli(["agent", "ps", "--json", "--socket", sock]);
    return ps.code === 0 ? (JSON.parse(ps.stdout) as ContainerStatus[]) : [];
  };
  // B's containers are stopped through B before B goes (teardown runs last-in first).
  td.defer(async () => {
    for (const c of await containersOn(sockB))
      await up.cli(["agent", "stop", "--rm", "--grace", "1", "--socket", sockB, c.id]);
  });
  await waitFor(
    async () => {
      const { agents } = (await (await up.api("/api/v1/agents")).json()) as {
        agents: { hostname: string; state: string }[];
      };
      return agents.some((a) => a.hostname === `${b.namePrefix}-gang-b` && a.state === "ready");
    },
    {
      timeoutMs: 120_000,
      intervalMs: 300,
      what: `host B's agent to be ready; its output:\n${agentB.output()}`,
    },
  );
  const imported = await up.cli([
    "agent",
    "import",
    "--socket",
    sockB,
    "--kind",
    "rootfs",
    "--name",
    UP_PYTHON_IMAGE,
    await testRootfs(),
  ]);
  assert.equal(imported.code, 0, imported.stderr);
  writeFileSync(join(up.appDir, "app.py"), APP);

  await t.test(
    "the two ranks, one per host, all-reduce over gloo and rank 0's sum is the result",
    async () => {
      const out = await up.python(["app.py", "allreduce", "10"], 1_200_000);
      // Rank 0 gives 10, rank 1 gives 20.
      assert.match(
        out,
        /allreduce: \{'sum': 30\.0, 'world': 2, 'rank': 0, 'master': '10\.251\.0\.1', 'iface': 'gang0'\}/,
      );
      const members = [...(await containersOn(sockA)), ...(await containersOn(sockB))].filter(
        (c) => c.labels[GangLabels.gangId],
      );
      assert.equal(members.length, 2, JSON.stringify(members.map((c) => c.labels)));
      assert.equal(new Set(members.map((c) => c.labels[GangLabels.gangId])).size, 1);
      const onA = (await containersOn(sockA)).filter((c) => c.labels[GangLabels.gangId]);
      assert.equal(onA.length, 1, "one rank on each host");
    },
  );

  await t.test("a container outside the gang reaches neither rank", async () => {
    // Rank 0's runner listens on the control port while the gang is warm: from inside the gang it is reachable.
    const out = await up.python(["app.py", "probe", "10.251.0.1,10.251.0.2"], 120_000);
    const m = /probe: (\{.*\})/.exec(out);
    assert.ok(m, out);
    assert.doesNotMatch(m[1] ?? "", /connected|refused/, `an outsider reached a rank: ${out}`);
  });

  await t.test("killing one rank's container ends the gang with that rank named", async () => {
    const gangsOf = async () =>
      [...(await containersOn(sockA)), ...(await containersOn(sockB))].filter(
        (c) => c.labels[GangLabels.gangId] && c.state === "running",
      );
    // The allreduce gang may still be warm beside the new one.
    const before = new Set((await gangsOf()).map((c) => c.labels[GangLabels.gangId]));
    const run = up.python(["app.py", "hang"], 600_000);
    let rank1: ContainerStatus | undefined;
    await waitFor(
      async () => {
        const fresh = (await gangsOf()).filter((c) => !before.has(c.labels[GangLabels.gangId]));
        rank1 = fresh.length === 2 ? fresh.find((c) => c.labels[GangLabels.rank] === "1") : undefined;
        return rank1 !== undefined;
      },
      { timeoutMs: 300_000, intervalMs: 500, what: "the hang gang's two ranks to run" },
    );
    // Its tasks start once both ranks run; give rank 0 a moment to hand the task over.
    await new Promise((r) => setTimeout(r, 3000));
    process.kill((rank1 as ContainerStatus).pid, "SIGKILL");
    const out = await run;
    assert.match(out, /hang failed: .*gang rank 1/);
    const gangId = (rank1 as ContainerStatus).labels[GangLabels.gangId];
    await waitFor(
      async () =>
        ![...(await containersOn(sockA)), ...(await containersOn(sockB))].some(
          (c) => c.labels[GangLabels.gangId] === gangId && c.state === "running",
        ),
      { timeoutMs: 60_000, intervalMs: 500, what: "the rest of the killed gang to stop" },
    );
  });
});
