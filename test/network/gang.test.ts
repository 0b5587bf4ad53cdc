// Gangs' private networks (agent/network/gang.ts) with real devices and
// traffic: two stand-in hosts (network namespaces joined by a veth, the
// underlay), a GangNetworks in each, and "containers" (namespaces) joined as
// ranks of a gang over VXLAN. Then the agent's Network with a gang member on
// this host. Needs root, ip, bridge, nft and python3.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";
import { resolveEgressGuard } from "../../agent/network/egress-guard.ts";
import { GangNetworks } from "../../agent/network/gang.ts";
import {
  GANG_MTU,
  gangBridgeName,
  gangMac,
  gangVxlanName,
  VXLAN_OVERHEAD,
} from "../../agent/network/gang-member.ts";
import { fullRuleset } from "../../agent/network/nft-rules.ts";
import type { GangMember } from "../../api/index.ts";
import { GANG_IFACE } from "../../shared/gang.ts";
import { waitFor } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import {
  listenIn,
  NETWORK_COMMANDS,
  probeFrom,
  randomPort,
  spawnIn,
  startTestNetwork,
  sweepAfter,
  Teardown,
  type TestNames,
  testNames,
} from "./helpers.ts";

const exec = promisify(execFile);

/** Prints "ready", then the size of the one UDP datagram it receives on the port. */
const UDP_ONCE = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
print("got", len(s.recv(65535)), flush=True)
`;

/** Sends one datagram of argv[3] bytes with don't-fragment (IP_PMTUDISC_DO), a few times in case the first ARP is pending. */
const UDP_SEND_DF = `
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)
for _ in range(5):
    s.sendto(b"x" * int(sys.argv[3]), (sys.argv[1], int(sys.argv[2])))
    time.sleep(0.2)
`;
const ip = (...args: string[]) => exec("ip", args);
const COMMANDS = [...NETWORK_COMMANDS, "bridge"];

interface Link {
  ifname: string;
  mtu: number;
  address: string;
  master?: string;
  addr_info?: { family: string; local: string; prefixlen: number }[];
}

/** The links of a namespace (undefined: the host's own), with their addresses. */
async function links(netns?: string): Promise<Link[]> {
  const { stdout } = await exec("ip", [...(netns ? ["-n", netns] : []), "-j", "addr", "show"]);
  return JSON.parse(stdout) as Link[];
}

/** Gang devices (prefix + g…) in a namespace. */
async function gangLinks(names: TestNames, netns?: string): Promise<string[]> {
  return (await links(netns)).map((l) => l.ifname).filter((n) => n.startsWith(`${names.namePrefix}g`));
}

/** The agent's full nftables ruleset (nft-rules.ts) for these names, applied inside a stand-in host. */
async function applyAgentRules(netns: string, names: TestNames): Promise<void> {
  const script = fullRuleset(
    {
      table: names.table,
      bridge: names.bridge,
      namePrefix: names.namePrefix,
      subnet4: names.subnet4,
      subnet6: names.subnet6,
      blockedDestinations: [],
      guard: resolveEgressGuard({}),
      nameservers: [],
    },
    [],
  );
  await new Promise<void>((resolve, reject) => {
    const child = execFile("ip", ["netns", "exec", netns, "nft", "-f", "-"], (e) =>
      e ? reject(e) : resolve(),
    );
    child.stdin?.end(script);
  });
}

/** A namespace with lo up, deleted at teardown (its devices go with it). */
async function makeNetns(down: Teardown, name: string): Promise<string> {
  down.defer(() => ip("netns", "del", name).catch(() => {}));
  await ip("netns", "add", name);
  await ip("-n", name, "link", "set", "lo", "up");
  return name;
}

test("a gang's ranks on two hosts reach each other over VXLAN, and nobody else reaches them", async (t) => {
  if (!needs(t, { root: true, commands: COMMANDS })) return;
  const down = new Teardown(t);
  const names = await testNames();
  const p = names.namePrefix;
  const x = names.octet;
  // Runs last: nothing of these names on the host once the namespaces are gone.
  sweepAfter(down, names);

  // Two hosts and their underlay: 10.215.X.1 (A) and .2 (B).
  const hostA = await makeNetns(down, `${p}-ha`);
  const hostB = await makeNetns(down, `${p}-hb`);
  await ip("-n", hostA, "link", "add", "u0", "type", "veth", "peer", "name", "u0", "netns", hostB);
  const addrA = `10.215.${x}.1`;
  const addrB = `10.215.${x}.2`;
  await ip("-n", hostA, "addr", "add", `${addrA}/24`, "dev", "u0");
  await ip("-n", hostB, "addr", "add", `${addrB}/24`, "dev", "u0");
  // Jumbo frames on the underlay, as GPU clusters' networks often have: gang0 follows them.
  await ip("-n", hostA, "link", "set", "u0", "mtu", "9000", "up");
  await ip("-n", hostB, "link", "set", "u0", "mtu", "9000", "up");

  // Each host has the agent's nftables rules (nft-rules.ts), as a real agent's host would.
  for (const ns of [hostA, hostB]) await applyAgentRules(ns, names);

  const gangsA = new GangNetworks({ namePrefix: p, localAddress: addrA, netns: hostA });
  const gangsB = new GangNetworks({ namePrefix: p, localAddress: addrB, netns: hostB });
  const vni = 100 + x;
  const gang = (rank: number, over: Partial<GangMember> = {}): GangMember => ({
    id: `gang-${p}`,
    vni,
    rank,
    size: 2,
    hosts: [addrA, addrB],
    subnet: "10.251.0.0/24",
    masterPort: 29500,
    ...over,
  });

  // Rank 0 on A, rank 1 on B; on A also a member of another gang (same subnet,
  // the same address as rank 0) and a plain container A routes for.
  const c0 = await makeNetns(down, `${p}-c0`);
  const c1 = await makeNetns(down, `${p}-c1`);
  const other = await makeNetns(down, `${p}-c2`);
  const plain = await makeNetns(down, `${p}-c3`);
  await gangsA.join("ctr-0", gang(0), c0);
  await gangsB.join("ctr-1", gang(1), c1);
  await gangsA.join(
    "ctr-other",
    gang(0, { id: `other-${p}`, vni: vni + 1000, hosts: [addrA, "198.51.100.9"] }),
    other,
  );
  await ip("-n", hostA, "link", "add", "p3", "type", "veth", "peer", "name", "eth0", "netns", plain);
  await ip("-n", hostA, "addr", "add", `10.216.${x}.1/24`, "dev", "p3");
  await ip("-n", hostA, "link", "set", "p3", "up");
  await ip("-n", plain, "addr", "add", `10.216.${x}.2/24`, "dev", "eth0");
  await ip("-n", plain, "link", "set", "eth0", "up");
  await ip("-n", plain, "route", "add", "default", "via", `10.216.${x}.1`);
  await exec("ip", ["netns", "exec", hostA, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);

  // Each rank's gang0: its address, MAC and MTU.
  for (const [ns, rank] of [
    [c0, 0],
    [c1, 1],
  ] as const) {
    const g = (await links(ns)).find((l) => l.ifname === GANG_IFACE);
    assert.ok(g, `${GANG_IFACE} in rank ${rank}'s namespace`);
    assert.equal(g.mtu, 9000 - VXLAN_OVERHEAD);
    assert.equal(g.address, gangMac(vni, rank));
    assert.deepEqual(
      g.addr_info?.filter((a) => a.family === "inet").map((a) => `${a.local}/${a.prefixlen}`),
      [`10.251.0.${rank + 1}/24`],
    );
  }
  // On each host: the gang's bridge with the VXLAN device and the member's veth, and no address.
  for (const ns of [hostA, hostB]) {
    const l = await links(ns);
    const bridge = l.find((d) => d.ifname === gangBridgeName(p, vni));
    assert.ok(bridge, `gang bridge on ${ns}`);
    assert.deepEqual(bridge.addr_info ?? [], [], `the gang bridge on ${ns} has no address`);
    assert.equal(l.find((d) => d.ifname === gangVxlanName(p, vni))?.master, bridge.ifname);
    assert.equal(l.filter((d) => d.master === bridge.ifname).length, 2, `two ports on ${ns}'s gang bridge`);
  }
  // The other host is host A's only flooding destination for the gang, and rank 1's MAC goes there.
  const { stdout: fdb } = await exec("bridge", ["-n", hostA, "fdb", "show", "dev", gangVxlanName(p, vni)]);
  assert.match(fdb, new RegExp(`00:00:00:00:00:00 dst ${addrB.replaceAll(".", "\\.")}`));
  assert.match(fdb, new RegExp(`${gangMac(vni, 1)} dst ${addrB.replaceAll(".", "\\.")}`));
  assert.doesNotMatch(fdb, new RegExp(`dst ${addrA.replaceAll(".", "\\.")}`), "no tunnel to itself");

  // Both ways over the tunnel.
  const port = randomPort();
  await listenIn(down, c1, port, "rank1");
  await listenIn(down, c0, port, "rank0");
  assert.equal(await probeFrom(c0, "10.251.0.2", port), "OK rank1");
  assert.equal(await probeFrom(c1, "10.251.0.1", port), "OK rank0");
  // A full-size frame crosses the tunnel whole: a datagram filling gang0's MTU, sent with don't-fragment.
  const size = 9000 - VXLAN_OVERHEAD - 28;
  const receiver = spawnIn(down, c1, ["python3", "-c", UDP_ONCE, String(port)]);
  let received = "";
  receiver.stdout?.on("data", (d) => {
    received += d;
  });
  await waitFor(() => received.includes("ready"), { timeoutMs: 10_000, what: "the UDP receiver" });
  await exec("ip", [
    "netns",
    "exec",
    c0,
    "python3",
    "-c",
    UDP_SEND_DF,
    "10.251.0.2",
    String(port),
    String(size),
  ]);
  await waitFor(() => received.includes("got"), { timeoutMs: 10_000, what: "the full-size datagram" });
  assert.match(received, new RegExp(`got ${size}\\b`));
  // The other gang's rank 1 is on a host A has no route to: gang0 gets the default MTU.
  assert.equal((await links(other)).find((l) => l.ifname === GANG_IFACE)?.mtu, GANG_MTU);
  // Another gang's member, same subnet and address as rank 0, is on a segment of its own.
  assert.match(await probeFrom(other, "10.251.0.2", port), /^FAIL/);
  // Neither a container the host routes for nor the host itself has a way in.
  assert.match(await probeFrom(plain, "10.251.0.2", port), /^FAIL/);
  assert.match(await probeFrom(plain, "10.251.0.1", port), /^FAIL/);
  assert.match(await probeFrom(hostA, "10.251.0.1", port), /^FAIL/);
  assert.match(await probeFrom(hostB, "10.251.0.2", port), /^FAIL/);

  // A member that routes to its host through gang0 (as one with CAP_NET_ADMIN could) gets nothing:
  // the host answers ARP for its addresses on any link, but the rules drop what arrives on a gang bridge.
  await listenIn(down, hostA, port, "hostA");
  await ip("-n", c0, "route", "add", `${addrA}/32`, "dev", GANG_IFACE);
  // Even with a way back to the gang's subnet (the agent never adds one) the host answers nothing there.
  await ip("-n", hostA, "route", "add", "10.251.0.0/24", "dev", gangBridgeName(p, vni));
  assert.match(await probeFrom(c0, addrA, port), /^FAIL/);
  assert.equal(await probeFrom(plain, addrA, port), "OK hostA", "the host's listener answers others");

  // An agent restart on A: a new instance keeps live members' devices and drops the rest.
  const restarted = new GangNetworks({ namePrefix: p, localAddress: addrA, netns: hostA });
  const removed = await restarted.recover(["ctr-0"]);
  assert.deepEqual(
    removed.sort(),
    [
      gangBridgeName(p, vni + 1000),
      gangVxlanName(p, vni + 1000),
      ...removed.filter((n) => n.includes("gv")),
    ].sort(),
  );
  assert.equal(removed.filter((n) => n.includes("gv")).length, 1, "the other gang's veth");
  assert.deepEqual([...restarted.list()], [["ctr-0", vni]]);
  assert.equal(await probeFrom(c0, "10.251.0.2", port), "OK rank1");
  assert.ok(!(await links(other)).some((l) => l.ifname === GANG_IFACE), "the dropped member's gang0 is gone");

  // Members leave: the veth (and gang0) at once, the gang's devices with the last member on the host.
  await restarted.leave("ctr-0");
  assert.ok(!(await links(c0)).some((l) => l.ifname === GANG_IFACE));
  assert.deepEqual(await gangLinks(names, hostA), []);
  assert.match(await probeFrom(c1, "10.251.0.1", port), /^FAIL/);
  await gangsB.leave("ctr-1");
  await gangsB.leave("ctr-1");
  assert.deepEqual(await gangLinks(names, hostB), []);
});

test("the agent's network joins an attached container to its gang and detach takes it out", async (t) => {
  if (!needs(t, { root: true, commands: COMMANDS })) return;
  const down = new Teardown(t);
  const names = await testNames();
  const p = names.namePrefix;
  sweepAfter(down, names);
  const { net } = await startTestNetwork(t, down, names, { poolSize: 0, nodeAddress: "192.0.2.1" });
  const vni = 200 + names.octet;
  const member: GangMember = {
    id: `gang-${p}`,
    vni,
    rank: 1,
    size: 3,
    // Rank 0 on another host; ranks 1 and 2 both here.
    hosts: ["203.0.113.7", "192.0.2.1", "192.0.2.1"],
    subnet: "10.251.0.0/24",
    masterPort: 29500,
  };
  const a = await net.attach("ctr-gang", { mode: "open" });
  await net.joinGang("ctr-gang", member);
  const g = (await links(a.netns)).find((l) => l.ifname === GANG_IFACE);
  assert.equal(
    g?.addr_info?.find((i) => i.family === "inet")?.local,
    "10.251.0.2",
    "gang0 has rank 1's address",
  );
  // The agent's own interface is untouched, its default route too.
  assert.ok((await links(a.netns)).some((l) => l.ifname === "eth0"));
  const { stdout: routes } = await exec("ip", ["-n", a.netns, "route", "show", "default"]);
  assert.match(routes, /dev eth0/);
  assert.equal((await gangLinks(names)).length, 3, "bridge, VXLAN device and veth on the host");
  const { stdout: vx } = await exec("ip", ["-d", "link", "show", "dev", gangVxlanName(p, vni)]);
  assert.match(vx, new RegExp(`vxlan id ${vni} local 192\\.0\\.2\\.1 .*dstport 4789.*nolearning`, "s"));
  // The bridge has no address, not even an IPv6 link-local one.
  const bridge = (await links()).find((l) => l.ifname === gangBridgeName(p, vni));
  assert.deepEqual(bridge?.addr_info ?? [], []);
  // Joining a container that has no network is refused.
  await assert.rejects(net.joinGang("ctr-none", member), /no network attachment/);

  // A second member here shares the gang's devices and reaches the first over the bridge.
  const b = await net.attach("ctr-gang-b", { mode: "open" });
  await net.joinGang("ctr-gang-b", { ...member, rank: 2 });
  assert.equal((await gangLinks(names)).length, 4, "bridge, VXLAN device and two veths on the host");
  const { stdout: fdb } = await exec("bridge", ["fdb", "show", "dev", gangVxlanName(p, vni)]);
  assert.equal(fdb.match(/^00:00:00:00:00:00 dst 203\.0\.113\.7 /gm)?.length, 1, fdb);
  assert.match(fdb, new RegExp(`^${gangMac(vni, 0)} dst 203\\.0\\.113\\.7 `, "m"));
  assert.doesNotMatch(fdb, /dst 192\.0\.2\.1 /, "no tunnel to this host itself");
  const port = randomPort();
  await listenIn(down, b.netns, port, "rank2");
  assert.equal(await probeFrom(a.netns, "10.251.0.3", port), "OK rank2");

  await net.detach("ctr-gang");
  assert.equal((await gangLinks(names)).length, 3, "the gang's devices stay with its member here");
  await net.detach("ctr-gang-b");
  assert.deepEqual(await gangLinks(names), []);

  // destroy() takes the gangs' devices with everything else.
  await net.attach("ctr-gang2", { mode: "open" });
  await net.joinGang("ctr-gang2", member);
  assert.equal((await gangLinks(names)).length, 3);
  await net.destroy();
  assert.deepEqual(await gangLinks(names), []);
});
