// iproute2 operations: bridge, network namespaces, veth pairs, addresses.
// Each is idempotent so that a retry, or a start after a crash, converges.

import { writeFile } from "node:fs/promises";
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
  // Router advertisements on the bridge would let a container's RA reconfigure the host.
  await writeSysctl(`net/ipv6/conf/${bridge}/accept_ra`, "0");
  await run("ip", ["addr", "replace", gateway4, "dev", bridge]);
  await run("ip", ["-6", "addr", "replace", gateway6, "dev", bridge, "nodad"]);
  await run("ip", ["link", "set", "dev", bridge, "up"]);
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

/**
 * A fresh namespace with lo up and a veth pair: `eth0` inside (down, no
 * address yet), `vethHost` on the bridge as an isolated port. Leftovers of the
 * same names are removed first.
 */
export async function createNamespaceWithVeth(
  netns: string,
  vethHost: string,
  bridge: string,
): Promise<void> {
  await deleteLink(vethHost);
  await deleteNetns(netns);
  try {
    await run("ip", ["netns", "add", netns]);
    await run("ip", ["-n", netns, "link", "set", "dev", "lo", "up"]);
    await run("ip", [
      "link",
      "add",
      "name",
      vethHost,
      "type",
      "veth",
      "peer",
      "name",
      "eth0",
      "netns",
      netns,
    ]);
    await run("ip", ["link", "set", "dev", vethHost, "master", bridge]);
    // Isolated ports exchange frames only with non-isolated ones (the bridge itself).
    await run("ip", ["link", "set", "dev", vethHost, "type", "bridge_slave", "isolated", "on"]);
    await run("ip", ["link", "set", "dev", vethHost, "up"]);
  } catch (e) {
    await deleteLink(vethHost).catch(() => {});
    await deleteNetns(netns).catch(() => {});
    throw e;
  }
}

/** Addresses, link state and default routes of the container end. */
export async function configureContainerSide(
  netns: string,
  a: { ipv4: string; prefix4: number; ipv6: string; prefix6: number; gateway4: string; gateway6: string },
): Promise<void> {
  const ip = (...args: string[]) => run("ip", ["-n", netns, ...args]);
  await ip("addr", "replace", `${a.ipv4}/${a.prefix4}`, "dev", "eth0");
  await ip("-6", "addr", "replace", `${a.ipv6}/${a.prefix6}`, "dev", "eth0", "nodad");
  await ip("link", "set", "dev", "eth0", "up");
  await ip("route", "replace", "default", "via", a.gateway4, "dev", "eth0");
  await ip("-6", "route", "replace", "default", "via", a.gateway6, "dev", "eth0");
}
