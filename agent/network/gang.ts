// A gang's private network on one host (shared/gang.ts): a VXLAN device and a
// bridge per gang, and per member container a veth whose inner end is its
// GANG_IFACE with the rank's address. The other hosts of the gang are the
// VXLAN device's static forwarding entries (no multicast, no learning: the
// coordinator says where every rank lives). The bridge has no address on the
// host, so a member reaches the other members and nothing else through it.
//
// Each member's host veth has its container id as alias, so that recover()
// after an agent restart knows whose it is. Names and checks: gang-member.ts.

import { randomBytes } from "node:crypto";
import { isIPv4 } from "node:net";
import type { GangMember } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { GANG_IFACE, GANG_VXLAN_PORT, gangRankAddress } from "../../shared/gang.ts";
import { isMissingError, run, tryRun } from "./exec.ts";
import {
  GANG_MTU,
  gangBridgeName,
  gangLinkPattern,
  gangMac,
  gangVethPattern,
  gangVxlanName,
  VXLAN_OVERHEAD,
} from "./gang-member.ts";

export interface GangNetworksOptions {
  /** The agent's network name prefix (NetworkOptions.namePrefix). */
  namePrefix: string;
  /**
   * This host's address to the other agents (`berth agent --node-address`):
   * the VXLAN devices' local end. Absent: the member's own entry in hosts.
   */
  localAddress?: string;
  /** Runs every ip/bridge command in this named namespace instead (tests' stand-in hosts). */
  netns?: string;
}

interface Joined {
  vni: number;
  veth: string;
}

interface GangLink {
  ifname: string;
  ifalias?: string;
  mtu?: number;
}

export class GangNetworks {
  /** Member containers on this host, by container id. */
  private readonly members = new Map<string, Joined>();
  private tail: Promise<unknown> = Promise.resolve();

  constructor(readonly options: GangNetworksOptions) {}

  /** The members joined now (container id → vni). */
  list(): Map<string, number> {
    return new Map([...this.members].map(([id, j]) => [id, j.vni]));
  }

  /**
   * Joins a container (its network namespace `containerNetns`) to its gang:
   * the gang's VXLAN device and bridge if this is its first member here, the
   * other hosts as forwarding entries, and GANG_IFACE with the rank's address.
   * `member` must have passed validateGangMember. Joining again is a no-op.
   */
  async join(containerId: string, member: GangMember, containerNetns: string): Promise<void> {
    await this.locked(async () => {
      if (this.members.has(containerId)) return;
      const { vni, rank } = member;
      try {
        const mtu = await this.ensureGangDevices(member);
        const veth = await this.freeVethName();
        this.members.set(containerId, { vni, veth });
        await this.batch(undefined, [
          `link add name ${veth} mtu ${mtu} type veth peer name ${GANG_IFACE} netns ${containerNetns}`,
          // The alias ties the device to its container across agent restarts (recover()).
          `link set dev ${veth} alias ${containerId}`,
          `link set dev ${veth} addrgenmode none`,
          `link set dev ${veth} master ${gangBridgeName(this.options.namePrefix, vni)} up`,
        ]);
        await this.batch(containerNetns, [
          `link set dev ${GANG_IFACE} address ${gangMac(vni, rank)} mtu ${mtu}`,
          `addr add ${gangRankAddress(member.subnet, rank)}/24 dev ${GANG_IFACE}`,
          `link set dev ${GANG_IFACE} up`,
        ]);
      } catch (e) {
        // What this join made goes: its veth, and the gang's devices unless another member has them.
        if (this.members.has(containerId)) await this.leaveLocked(containerId).catch(() => {});
        else await this.dropUnusedGang(vni).catch(() => {});
        throw e;
      }
    });
  }

  /** Takes a container out of its gang; the gang's devices go with its last member here. Absent is fine. */
  async leave(containerId: string): Promise<void> {
    await this.locked(() => this.leaveLocked(containerId));
  }

  /**
   * After an agent restart: keeps the members of live containers (found by
   * their veth's alias) and removes every other gang device of this prefix,
   * a previous run's leftovers. Returns the names removed.
   */
  async recover(liveContainerIds: Iterable<string>): Promise<string[]> {
    const live = new Set(liveContainerIds);
    return this.locked(async () => {
      const removed: string[] = [];
      const pattern = gangLinkPattern(this.options.namePrefix);
      const links = (await this.links()).filter((l) => pattern.test(l.ifname));
      const masters = new Map((await this.links("veth")).map((l) => [l.ifname, l.master]));
      for (const l of links) {
        if (!gangVethPattern(this.options.namePrefix).test(l.ifname)) continue;
        const vni = vniOfBridge(this.options.namePrefix, masters.get(l.ifname));
        if (l.ifalias && live.has(l.ifalias) && vni !== undefined) {
          this.members.set(l.ifalias, { vni, veth: l.ifname });
        } else {
          await this.deleteLink(l.ifname);
          removed.push(l.ifname);
        }
      }
      const inUse = new Set([...this.members.values()].map((j) => j.vni));
      for (const l of links) {
        const m = pattern.exec(l.ifname);
        if (!m || m[1] === "v" || inUse.has(Number.parseInt(m[2] ?? "", 16))) continue;
        await this.deleteLink(l.ifname);
        removed.push(l.ifname);
      }
      return removed;
    });
  }

  /** Removes every gang device of this prefix, members or not. */
  async destroy(): Promise<void> {
    await this.locked(async () => {
      this.members.clear();
      await removeGangLinks(this.options.namePrefix, this.options.netns);
    });
  }

  private async leaveLocked(containerId: string): Promise<void> {
    const joined = this.members.get(containerId);
    if (!joined) return;
    // The veth's inner end (GANG_IFACE) goes with it.
    await this.deleteLink(joined.veth);
    this.members.delete(containerId);
    await this.dropUnusedGang(joined.vni);
  }

  /** Deletes a gang's bridge and VXLAN device when no member on this host has them. */
  private async dropUnusedGang(vni: number): Promise<void> {
    if ([...this.members.values()].some((j) => j.vni === vni)) return;
    await this.deleteLink(gangBridgeName(this.options.namePrefix, vni));
    await this.deleteLink(gangVxlanName(this.options.namePrefix, vni));
  }

  /** One `ip [-n NETNS] -batch -` (NETNS absent: the host's, options.netns): one process, not one per step. */
  private async batch(netns: string | undefined, lines: string[]): Promise<void> {
    for (const l of lines) {
      if (/[\n\r#"'\\]/.test(l))
        throw new BerthError("internal", `unsafe ip batch line ${JSON.stringify(l)}`);
    }
    const ns = netns ? ["-n", netns] : this.nsArgs();
    await run("ip", [...ns, "-batch", "-"], `${lines.join("\n")}\n`);
  }

  /**
   * The gang's VXLAN device and bridge, made if missing, and a forwarding
   * entry per other host. Returns the MTU its members' interfaces get.
   */
  private async ensureGangDevices(m: GangMember): Promise<number> {
    const p = this.options.namePrefix;
    const vxlan = gangVxlanName(p, m.vni);
    const bridge = gangBridgeName(p, m.vni);
    const self = this.options.localAddress ?? m.hosts[m.rank];
    if (!(await this.linkExists(vxlan))) {
      const local = self && isIPv4(self) ? ` local ${self}` : "";
      await this.batch(undefined, [
        `link add name ${vxlan} type vxlan id ${m.vni} dstport ${GANG_VXLAN_PORT}${local} nolearning`,
      ]);
    }
    if (!(await this.linkExists(bridge)))
      await this.batch(undefined, [`link add name ${bridge} type bridge`]);
    const peers = new Set(m.hosts.filter((h) => h !== self && h !== m.hosts[m.rank]));
    const mtu = await this.tunnelMtu([...peers]);
    await this.batch(undefined, [
      `link set dev ${vxlan} mtu ${mtu}`,
      // No IPv6 link-local address on either: the host keeps no address a member could reach it at.
      `link set dev ${bridge} addrgenmode none`,
      `link set dev ${vxlan} addrgenmode none`,
      `link set dev ${vxlan} master ${bridge} up`,
      `link set dev ${bridge} up`,
    ]);
    // An earlier member of the gang here may have added some: `append` twice is an error.
    const flooded = new Set(
      [
        ...(await this.cmd("bridge", "fdb", "show", "dev", vxlan)).matchAll(/^00:00:00:00:00:00 dst (\S+)/gm),
      ].map((x) => x[1]),
    );
    const lines = [
      // Broadcasts (ARP) and unknown destinations go to every other host once.
      ...[...peers]
        .filter((h) => !flooded.has(h))
        .map((h) => `fdb append 00:00:00:00:00:00 dev ${vxlan} dst ${h}`),
      // Each remote rank's MAC goes to its own host alone.
      ...[...m.hosts.entries()]
        .filter(([, h]) => peers.has(h))
        .map(([rank, h]) => `fdb replace ${gangMac(m.vni, rank)} dev ${vxlan} dst ${h}`),
    ];
    if (lines.length > 0) await run("bridge", [...this.nsArgs(), "-batch", "-"], `${lines.join("\n")}\n`);

    return mtu;
  }

  /**
   * The smallest MTU of the links this host reaches the peers through, less
   * VXLAN_OVERHEAD: a full frame on gang0 then fits one packet on the wire,
   * jumbo frames included. GANG_MTU when no peer has a route (or there is none).
   */
  private async tunnelMtu(peers: string[]): Promise<number> {
    if (peers.length === 0) return GANG_MTU;
    // -force: a peer without a route does not stop the others' lookups.
    const lookups = `${peers.map((p) => `route get ${p}`).join("\n")}\n`;
    const routes = await tryRun("ip", [...this.nsArgs(), "-force", "-o", "-batch", "-"], lookups);
    // A peer that is an address of this host (a misconfiguration) goes through lo: not the wire.
    const devs = new Set(
      [...routes.stdout.matchAll(/\bdev (\S+)/g)].map((x) => x[1]).filter((d) => d !== "lo"),
    );
    const mtus = (await this.links()).filter((l) => devs.has(l.ifname)).map((l) => l.mtu ?? 0);
    const least = Math.min(...mtus.filter((x) => x > VXLAN_OVERHEAD + 68));
    return Number.isFinite(least) ? least - VXLAN_OVERHEAD : GANG_MTU;
  }

  private async freeVethName(): Promise<string> {
    const taken = new Set([...this.members.values()].map((j) => j.veth));
    for (;;) {
      const name = `${this.options.namePrefix}gv${randomBytes(3).toString("hex")}`;
      if (!taken.has(name) && !(await this.linkExists(name))) return name;
    }
  }

  private nsArgs(): string[] {
    return this.options.netns ? ["-n", this.options.netns] : [];
  }

  private ip(...args: string[]): Promise<string> {
    return this.cmd("ip", ...args);
  }

  private cmd(tool: "ip" | "bridge", ...args: string[]): Promise<string> {
    return run(tool, [...this.nsArgs(), ...args]);
  }

  private async linkExists(name: string): Promise<boolean> {
    return (await tryRun("ip", [...this.nsArgs(), "link", "show", "dev", name])).exitCode === 0;
  }

  private async deleteLink(name: string): Promise<void> {
    await deleteGangLink(name, this.options.netns);
  }

  private async links(kind?: string): Promise<(GangLink & { master?: string })[]> {
    const out = await this.ip("-j", "link", "show", ...(kind ? ["type", kind] : []));
    return out.trim() ? JSON.parse(out) : [];
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(fn, fn);
    this.tail = result.catch(() => {});
    return result;
  }
}

function vniOfBridge(prefix: string, master: string | undefined): number | undefined {
  const m = master ? gangLinkPattern(prefix).exec(master) : null;
  return m && m[1] === "b" ? Number.parseInt(m[2] ?? "", 16) : undefined;
}

async function deleteGangLink(name: string, netns?: string): Promise<void> {
  const r = await tryRun("ip", [...(netns ? ["-n", netns] : []), "link", "del", "dev", name]);
  if (r.exitCode !== 0 && !isMissingError(r.stderr))
    throw new BerthError("internal", `cannot delete link ${name}: ${r.stderr.trim()}`);
}

/** Removes every gang device named by this prefix (veths first): uninstall, tests, destroy(). */
export async function removeGangLinks(prefix: string, netns?: string): Promise<string[]> {
  const out = await run("ip", [...(netns ? ["-n", netns] : []), "-j", "link", "show"]);
  const pattern = gangLinkPattern(prefix);
  const names = (out.trim() ? (JSON.parse(out) as GangLink[]) : [])
    .map((l) => l.ifname)
    .filter((n) => pattern.test(n));
  // Veths first: a bridge deleted under them would leave them unattached for a moment.
  names.sort((a, b) => Number(pattern.exec(b)?.[1] === "v") - Number(pattern.exec(a)?.[1] === "v"));
  for (const n of names) await deleteGangLink(n, netns);
  return names;
}
