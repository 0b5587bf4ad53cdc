// iproute2 operations: bridge, network namespaces, veth pairs, addresses.
// Each is idempotent so that a retry, or a start after a crash, converges.

import { readFile, writeFile } from "node:fs/promises";
import { BerthError } from "../../shared/errors.ts";
import { isMissingError, run, tryRun } from "./exec.ts";

interface IpLink {
  ifname: string;
  master?: string;
}

interface IpAddrInfo {
  ifname: string;
  addr_info?: { family: string; local: string; prefixlen: number }[];
}

/** Names of all links in the host namespace. */
export async function listLinks(): Promise<IpLink[]> {
  const out = await run("ip", ["-j", "link", "show"]);
  return out.trim() ? (JSON.parse(out) as IpLink[]) : [];
}

export async function linkExists(name: string): Promise<boolean> {
  const r = await tryRun("ip", ["link", "show", "dev", name]);
  return r.exitCode === 0;
}

/** Every address of every host interface, with the interface name. */
export async function hostAddresses(): Promise<{ ifname: string; address: string; prefixlen: number }[]> {
  const out = await run("ip", ["-j", "addr", "show"]);
  const links = out.trim() ? (JSON.parse(out) as IpAddrInfo[]) : [];
  return links.flatMap((l) =>
    (l.addr_info ?? []).map((a) => ({ ifname: l.ifname, address: a.local, prefixlen: a.prefixlen })),
  );
}

export async function listNetns(): Promise<string[]> {
  const out = await run("ip", ["-j", "netns", "list"]);
  return out.trim() ? (JSON.parse(out) as { name: string }[]).map((n) => n.name) : [];
}

export const netnsPath = (name: string) => `/run/netns/${name}`;

/** Creates the bridge if missing, brings it up and gives it the gateway addresses. */
export async function ensureBridge(bridge: string, gateway4: string, gateway6: string): Promise<void> {
  if (!(await linkExists(bridge))) {
    const r = await tryRun("ip", ["link", "add", "name", bridge, "type", "bridge"]);
    if (r.exitCode !== 0 && !/file exists/i.test(r.stderr)) {
      throw new BerthError("internal", `cannot create bridge ${bridge}: ${r.stderr.trim()}`);
    }
  }
  await pinBridgeAddress(bridge);
  // Router advertisements on the bridge would let a container's RA reconfigure the host.
  await writeSysctl(`net/ipv6/conf/${bridge}/accept_ra`, "0");
  await run("ip", ["addr", "replace", gateway4, "dev", bridge]);
  await run("ip", ["-6", "addr", "replace", gateway6, "dev", bridge, "nodad"]);
  await run("ip", ["link", "set", "dev", bridge, "up"]);
}

/**
 * A bridge whose MAC address was never set takes the lowest MAC of its ports,
 * so a port joining (the pool refilling) or leaving (a container stopping)
 * can change the gateway's MAC under running containers, whose ARP caches
 * then point at an address nobody answers for seconds. Setting the address
 * it has now, once, keeps it fixed from then on (addr_assign_type 3, "set").
 */
async function pinBridgeAddress(bridge: string): Promise<void> {
  const sys = `/sys/class/net/${bridge}`;
  if ((await readFile(`${sys}/addr_assign_type`, "utf8")).trim() === "3") return;
  const address = (await readFile(`${sys}/address`, "utf8")).trim();
  await run("ip", ["link", "set", "dev", bridge, "address", address]);
}

export async function writeSysctl(key: string, value: string): Promise<void> {
  try {
    await writeFile(`/proc/sys/${key}`, value);
  } catch (e) {
    throw new BerthError(
      "internal",
      `cannot set sysctl ${key.replaceAll("/", ".")}=${value}: ${(e as Error).message}`,
    );
  }
}

/** Removes a link (and so its veth peer); absent is fine. */
export async function deleteLink(name: string): Promise<void> {
  const r = await tryRun("ip", ["link", "del", "dev", name]);
  if (r.exitCode !== 0 && !isMissingError(r.stderr)) {
    throw new BerthError("internal", `cannot delete link ${name}: ${r.stderr.trim()}`);
  }
}

/** Removes a named network namespace; absent is fine. */
export async function deleteNetns(name: string): Promise<void> {
  const r = await tryRun("ip", ["netns", "delete", name]);
  if (r.exitCode !== 0 && !isMissingError(r.stderr)) {
    throw new BerthError("internal", `cannot delete network namespace ${name}: ${r.stderr.trim()}`);
  }
}

export interface ContainerSideAddresses {
  ipv4: string;
  prefix4: number;
  ipv6: string;
  prefix6: number;
  gateway4: string;
  gateway6: string;
}

/**
 * A fresh namespace with lo up and a veth pair: `eth0` inside, `vethHost` on
 * the bridge as an isolated port. With `addresses`, `eth0` also gets them,
 * is up and has its default routes, and `vethHost` stays DOWN: a namespace
 * configured ahead of demand passes no frame until setLinkUp(vethHost).
 * Without, `vethHost` is up and `eth0` stays down and bare. Two `ip` processes (one batch in
 * the host namespace, one inside the new one) instead of one per step: each
 * exec costs milliseconds on a busy host. When a leftover of the same names
 * is in the way, it is removed and the batch tried once more.
 */
export async function createNamespaceWithVeth(
  netns: string,
  vethHost: string,
  bridge: string,
  addresses?: ContainerSideAddresses,
): Promise<void> {
  const hostSide = [
    `netns add ${netns}`,
    `link add name ${vethHost} type veth peer name eth0 netns ${netns}`,
    `link set dev ${vethHost} master ${bridge}`,
    // Isolated ports exchange frames only with non-isolated ones (the bridge itself).
    `link set dev ${vethHost} type bridge_slave isolated on`,
    ...(addresses ? [] : [`link set dev ${vethHost} up`]),
  ];
  const attempt = async () => {
    await runIpBatch([], hostSide);
    await runIpBatch(
      ["-n", netns],
      ["link set dev lo up", ...(addresses ? containerSideLines(addresses) : [])],
    );
  };
  const removeBoth = async () => {
    await deleteLink(vethHost).catch(() => {});
    await deleteNetns(netns).catch(() => {});
  };
  try {
    await attempt();
  } catch (first) {
    await removeBoth();
    if (!/exists/i.test((first as Error).message)) throw first;
    try {
      await attempt();
    } catch (e) {
      await removeBoth();
      throw e;
    }
  }
}

/**
 * Addresses, link state and default routes of the container end, as lines
 * of one `ip -n NETNS -batch -`.
 */
function containerSideLines(a: ContainerSideAddresses): string[] {
  return [
    `addr replace ${a.ipv4}/${a.prefix4} dev eth0`,
    `addr replace ${a.ipv6}/${a.prefix6} dev eth0 nodad`,
    "link set dev eth0 up",
    `route replace default via ${a.gateway4} dev eth0`,
    // "::/0" rather than "default": batch lines take no -6, the prefix gives the family.
    `route replace ::/0 via ${a.gateway6} dev eth0`,
  ];
}

const IFF_UP = 0x1;

/**
 * Brings a host link up by writing its sysfs `flags` (the kernel's
 * dev_change_flags, as `ip link set up` does) instead of spawning `ip`: this
 * is the only step of an open-policy attach, on every container's start path.
 */
/** Forgets the namespace's neighbour entries (a failed ARP while its port was down would refuse the first connections). */
export async function flushNeighbours(netns: string): Promise<void> {
  await run("ip", ["-n", netns, "neigh", "flush", "all"]);
}

export async function setLinkUp(name: string): Promise<void> {
  if (!/^[A-Za-z0-9_.-]{1,15}$/.test(name))
    throw new BerthError("internal", `bad link name ${JSON.stringify(name)}`);
  const file = `/sys/class/net/${name}/flags`;
  try {
    const flags = Number.parseInt((await readFile(file, "utf8")).trim(), 16);
    if (flags & IFF_UP) return;
    await writeFile(file, `0x${(flags | IFF_UP).toString(16)}`);
  } catch (e) {
    throw new BerthError("internal", `cannot bring link ${name} up: ${(e as Error).message}`);
  }
}

/** Runs `ip [globalArgs] -batch -` with one command per line; the first failing line aborts it. */
async function runIpBatch(globalArgs: string[], lines: string[]): Promise<void> {
  for (const l of lines) {
    if (/[\n\r#"'\\]/.test(l)) throw new BerthError("internal", `unsafe ip batch line ${JSON.stringify(l)}`);
  }
  await run("ip", [...globalArgs, "-batch", "-"], `${lines.join("\n")}\n`);
}
