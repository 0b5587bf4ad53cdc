// Agent restart: a new Network instance over the same data dir finds the
// leases, rebuilds the nft tables (even when they were deleted meanwhile),
// removes a crashed run's pool namespaces, and recover() drops the containers
// that no longer exist. Needs root, ip, nft and python3.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { Network } from "../../agent/network/index.ts";
import { waitFor } from "../../shared/net.ts";
import { needs, tempDir } from "../helpers/env.ts";
import {
  createOutside,
  listenIn,
  networkOptions,
  NETWORK_COMMANDS,
  probeFrom,
  randomPort,
  spawnIn,
  startTestNetwork,
  sweepAfter,
  Teardown,
  testNames,
} from "./helpers.ts";

const exec = promisify(execFile);
const netnsList = async () => (await exec("ip", ["netns", "list"])).stdout;

interface IpamFileView {
  leases: { containerId: string; ipv4: string }[];
  reservations: { netns: string; ipv4: string }[];
}

test("restart: leases, rules and policies survive; leftovers and dead containers are removed", async (t) => {
  if (!needs(t, { root: true, commands: NETWORK_COMMANDS })) return;
  const down = new Teardown(t);
  const names = await testNames();
  sweepAfter(down, names);
  const outside = await createOutside(down, names);
  const port = randomPort();
  await listenIn(down, outside.netns, port, "outside");
  const dataDir = tempDir(t, "berth-net-");
  const options = networkOptions(names, dataDir, { poolSize: 1 });

  // First run; it "crashes" (no shutdown), leaving its pool namespace behind.
  const first = await Network.start(options);
  const live = await first.attach("ctr-live", { mode: "allow", cidrs: [`${outside.primary4}/32`] });
  const dead = await first.attach("ctr-dead", { mode: "open" });
  const inPort = randomPort();
  await first.allowInbound("ctr-live", inPort);
  const sleeper = spawnIn(down, live.netns, ["sleep", "600"]);
  await waitFor(() => first.poolAvailable === 1, { timeoutMs: 10_000, what: "the first run's pool refill" });
  const crashedPool = (await netnsList())
    .split("\n")
    .map((l) => l.split(" ")[0]!)
    .filter((n) => n.startsWith(`${names.namePrefix}-n`) && n !== live.netns && n !== dead.netns);
  assert.equal(crashedPool.length, 1, "the first run had one pooled namespace");
  const file = JSON.parse(readFileSync(join(dataDir, "ipam.json"), "utf8")) as IpamFileView;
  assert.deepEqual(file.leases.map((l) => l.containerId).sort(), ["ctr-dead", "ctr-live"]);
  assert.deepEqual(
    file.reservations.map((r) => r.netns),
    crashedPool,
    "the pooled namespace's addresses are reserved in the lease file",
  );
  // Someone deletes berth's tables while the agent is down.
  await exec("nft", ["delete", "table", "inet", names.table]);

  const { net } = await startTestNetwork(t, down, names, options);

  await t.test("IPAM survives re-instantiation from its file", () => {
    const again = net.get("ctr-live");
    assert.ok(again);
    assert.equal(again.ipv4, live.ipv4);
    assert.equal(again.ipv6, live.ipv6);
    assert.equal(again.netns, live.netns);
    assert.deepEqual(again.policy, { mode: "allow", cidrs: [`${outside.primary4}/32`] });
    assert.deepEqual(again.inboundPorts, [inPort]);
  });

  await t.test("start() removed the crashed run's pool namespace and filled its own pool", async () => {
    assert.ok(!(await netnsList()).includes(crashedPool[0]!));
    assert.equal(net.poolAvailable, 1);
    const after = JSON.parse(readFileSync(join(dataDir, "ipam.json"), "utf8")) as IpamFileView;
    assert.equal(after.reservations.length, 1);
    assert.notEqual(
      after.reservations[0]!.netns,
      crashedPool[0],
      "the crashed run's reservation is released",
    );
    const held = [...after.leases, ...after.reservations].map((l) => l.ipv4);
    assert.equal(new Set(held).size, held.length, `no address held twice: ${held.join(", ")}`);
  });

  await t.test("recover() keeps live containers and removes dead ones", async () => {
    const report = await net.recover(["ctr-live"]);
    assert.deepEqual(report.kept, ["ctr-live"]);
    assert.deepEqual(report.removed, ["ctr-dead"]);
    assert.deepEqual(report.missingNamespace, []);
    assert.equal(net.get("ctr-dead"), undefined);
    assert.ok(!(await netnsList()).includes(dead.netns));
    const { stdout: links } = await exec("ip", ["-o", "link", "show"]);
    assert.ok(!links.includes(dead.vethHost));
  });

  await t.test("the live container keeps its namespace, policy and exposed port", async () => {
    assert.equal(sleeper.exitCode, null);
    assert.equal(await probeFrom(live.netns, outside.primary4, port), "OK outside");
    assert.match(await probeFrom(live.netns, outside.secondary4, port), /^FAIL/);
    await listenIn(down, live.netns, inPort, "live");
    const { stdout } = await exec("python3", [
      "-c",
      "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2); print(s.recv(100).decode().strip())",
      live.ipv4,
      String(inPort),
    ]);
    assert.equal(stdout.trim(), "live");
  });

  await t.test("a new container gets a free address, not the live one's", async () => {
    const c = await net.attach("ctr-new", { mode: "open" });
    assert.notEqual(c.ipv4, live.ipv4);
    assert.equal(await probeFrom(c.netns, outside.primary4, port), "OK outside");
  });
});
