// Container networking on one host: a bridge with a gateway, one network
// namespace + veth pair per container, addresses from Ipam, and berth's own
// nftables tables for NAT, isolation and per-container egress policy.

import { randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { readdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { GangMember } from "../../api/index.ts";
import { type EgressPolicy, parseCidr, validateEgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import { netnsName, removeLeftovers, vethName } from "./cleanup.ts";
import { Ipam, type Lease, type Reservation } from "./ipam.ts";
import {
  createNamespaceWithVeth,
  deleteLink,
  deleteNetns,
  ensureBridge,
  flushNeighbours,
  hostAddresses,
  listNetns,
  netnsPath,
  setLinkUp,
  writeSysctl,
} from "./links.ts";
import { HostAddressCache } from "./host-addresses.ts";
import { applyNft, deleteNftTables, removeNft } from "./nft.ts";
import {
  type ContainerRulesInput,
  containerAddScript,
  containerRemoveStatements,
  fleetScript,
  fullRuleset,
  inboundLines,
  nameserverScript,
  policyScript,
} from "./nft-rules.ts";
import { type FleetDeny, resolveFleetDeny } from "./egress-guard.ts";
import { type NetworkOptions, type ResolvedNetworkOptions, resolveNetworkOptions } from "./options.ts";
import { GangNetworks } from "./gang.ts";
import { NamespacePool } from "./pool.ts";
import { containerResolvConf } from "./resolv.ts";
import { FORWARDING_SYSCTLS, recordSysctlsOnce } from "./sysctl-record.ts";

export interface ContainerNetwork {
  containerId: string;
  /** Named namespace (`ip netns`), and the file runc joins (`/run/netns/NAME`). */
  netns: string;
  netnsPath: string;
  ipv4: string;
  ipv6: string;
  prefix4: number;
  prefix6: number;
  gateway4: string;
  gateway6: string;
  /** Host end of the veth pair (a bridge port). */
  vethHost: string;
  /** File to bind-mount read-only at /etc/resolv.conf in the container. */
  resolvConfPath: string;
  policy: EgressPolicy;
  inboundPorts: number[];
}

/**
 * A pooled namespace held for a container started before anyone knows whose
 * it will be (a pre-warmed runner): its host port stays down, so nothing
 * passes in or out until attach() binds it to a container id and a policy.
 */
export interface ReservedNetwork {
  netns: string;
  /** The file runc joins. */
  netnsPath: string;
  /** Bind-mount this at /etc/resolv.conf: attach() makes it the container's own file (same inode). */
  resolvConfPath: string;
}

export interface RecoverReport {
  /** Leases of live containers, kept. */
  kept: string[];
  /** Leases of containers that no longer exist, removed with their namespace and rules. */
  removed: string[];
  /** Live containers whose named namespace is gone; their lease is kept (the process may still hold it). */
  missingNamespace: string[];
  /** Prefix-named namespaces and veths nobody owned, removed. */
  leftovers: string[];
}

export interface NetworkLogger {
  warn: (message: string) => void;
}

const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

function checkContainerId(id: string): void {
  if (typeof id !== "string" || !CONTAINER_ID.test(id)) {
    throw new BerthError("invalid_request", `container id ${JSON.stringify(id)} must match ${CONTAINER_ID}`);
  }
}

function checkPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new BerthError("invalid_request", `port ${port} must be an integer 1..65535`);
  }
}

export class Network {
  /** Each ready namespace holds its address reservation (configured on its eth0) and its open rules. */
  private readonly pool: NamespacePool<Reservation>;
  /** Names this process created that are not (yet) in a lease: pool entries and attaches in progress. */
  private readonly unleased = new Set<string>();
  /** Namespaces reserve() handed out, by name, until attach() or unreserve(). */
  private readonly held = new Map<string, Reservation>();
  private tail: Promise<unknown> = Promise.resolve();
  private readonly hostAddressCache: HostAddressCache;
  /** berth's ports on the fleet's hosts, as the nft sets hold them now. */
  private fleet: FleetDeny;
  /** The nameservers DNS may reach, as the nft sets hold them now (sorted, lower-case). */
  private nameservers: string[] = [];
  /** Gang members' private networks across hosts (gang.ts). */
  private readonly gangs: GangNetworks;

  private constructor(
    readonly options: ResolvedNetworkOptions,
    private readonly ipam: Ipam,
    log: NetworkLogger,
  ) {
    this.fleet = options.guard.fleet;
    this.gangs = new GangNetworks({
      namePrefix: options.namePrefix,
      ...(options.nodeAddress ? { localAddress: options.nodeAddress } : {}),
    });
    this.hostAddressCache = new HostAddressCache(
      async () => (await hostAddresses()).map((a) => a.address),
      options.hostAddressesMaxAgeMs,
      (e) => log.warn(`reading the host's addresses: ${(e as Error).message}`),
    );
    this.pool = new NamespacePool({
      size: options.poolSize,
      refillDelayMs: options.poolRefillDelayMs,
      create: () => this.createNamespace(),
      destroy: (ns) => this.destroyNamespace(ns),
      onError: (e) => log.warn(`network namespace pool: ${(e as Error).message}`),
    });
  }

  /**
   * Sets up the host (forwarding, bridge, nft tables rebuilt from the lease
   * file in one transaction), removes unleased leftovers of a previous run and
   * fills the namespace pool. Call recover() next with the live container ids.
   */
  static async start(options: NetworkOptions, log: NetworkLogger = { warn: () => {} }): Promise<Network> {
    const o = resolveNetworkOptions(options);
    mkdirSync(o.resolvDir, { recursive: true });
    const ipam = Ipam.load(o.stateFile, o.subnet4, o.subnet6);
    const net = new Network(o, ipam, log);
    if (o.enableForwarding) {
      // What forwarding was before berth, for `berth agent uninstall` to put back.
      recordSysctlsOnce(o.dataDir, FORWARDING_SYSCTLS);
      for (const key of FORWARDING_SYSCTLS) await writeSysctl(key, "1");
    }
    await net.checkSubnetsFree();
    await ensureBridge(
      o.bridge,
      `${o.subnet4.gateway}/${o.subnet4.prefix}`,
      `${o.subnet6.gateway}/${o.subnet6.prefix}`,
    );
    net.nameservers = await net.currentNameservers();
    await applyNft(
      fullRuleset(
        net.baseRules(),
        ipam.list().map((l) => net.rulesInput(l)),
      ),
    );
    // A previous run's pooled namespaces: no container ever got them. Their
    // reservations go now, their namespaces and veths with the other leftovers.
    for (const r of ipam.reservations()) ipam.unreserve(r.netns);
    await removeLeftovers(o.namePrefix, net.ownedNames());
    await net.pool.fill();
    return net;
  }

  /** Namespaces ready in the pool right now. */
  get poolAvailable(): number {
    return this.pool.available;
  }

  get(containerId: string): ContainerNetwork | undefined {
    const lease = this.ipam.get(containerId);
    return lease && this.view(lease);
  }

  list(): ContainerNetwork[] {
    return this.ipam.list().map((l) => this.view(l));
  }

  /**
   * Gives a container a namespace (from the pool), addresses, rules and a
   * resolv.conf. Attaching an attached container applies the policy and
   * returns what it has.
   */
  async attach(
    containerId: string,
    policy: EgressPolicy,
    reserved?: ReservedNetwork,
  ): Promise<ContainerNetwork> {
    checkContainerId(containerId);
    const p = validateEgressPolicy(policy);
    return this.locked(async () => {
      if (this.ipam.get(containerId)) {
        if (reserved) throw new BerthError("conflict", `container ${containerId} already has a network`);
        return this.setPolicyLocked(containerId, p);
      }
      const ns = reserved ? this.held.get(reserved.netns) : await this.pool.take();
      if (!ns) throw new BerthError("not_found", `network namespace ${reserved?.netns} is not reserved`);
      this.held.delete(ns.netns);
      // The reserved resolv.conf is bind-mounted already: renamed, it stays the same inode.
      if (reserved) await rename(reserved.resolvConfPath, this.resolvConfPath(containerId));
      // The namespace already has its addresses, routes and rules for the open
      // policy (see createNamespace); its host port is down. What is left:
      // binding the reservation, swapping the policy if it is not open (one
      // nft transaction), the resolv.conf, and only then the port up.
      let lease: Lease | undefined;
      try {
        lease = this.ipam.bind(ns.netns, containerId, p);
        this.unleased.delete(ns.netns);
        this.unleased.delete(ns.vethHost);
        const input = this.rulesInput(lease);
        const steps = await Promise.allSettled([
          p.mode === "open" ? Promise.resolve() : applyNft(policyScript(input)),
          this.writeResolvConf(containerId),
        ]);
        for (const step of steps) if (step.status === "rejected") throw step.reason;
        // A reserved namespace's container ran before: what it tried while its port was down leaves no trace.
        await Promise.all([setLinkUp(lease.vethHost), reserved ? flushNeighbours(ns.netns) : undefined]);
        return this.view(lease);
      } catch (e) {
        if (lease) await this.removeContainer(lease).catch(() => {});
        else await this.destroyNamespace(ns).catch(() => {});
        throw e;
      }
    });
  }

  /**
   * Takes a ready namespace for a container that starts before its owner is
   * known; its port stays down until attach() with this reservation. The
   * resolv.conf is written now, under the namespace's name.
   */
  async reserve(): Promise<ReservedNetwork> {
    return this.locked(async () => {
      const ns = await this.pool.take();
      this.held.set(ns.netns, ns);
      const path = join(this.options.resolvDir, `${ns.netns}.conf`);
      try {
        await this.writeResolvConfAt(path);
      } catch (e) {
        this.held.delete(ns.netns);
        await this.destroyNamespace(ns).catch(() => {});
        throw e;
      }
      return { netns: ns.netns, netnsPath: netnsPath(ns.netns), resolvConfPath: path };
    });
  }

  /** Gives back a reservation attach() never took: its namespace, veth, rules and resolv.conf go. */
  async unreserve(reserved: ReservedNetwork): Promise<void> {
    await this.locked(async () => {
      const ns = this.held.get(reserved.netns);
      this.held.delete(reserved.netns);
      if (ns) await this.destroyNamespace(ns);
      await rm(reserved.resolvConfPath, { force: true });
    });
  }

  /**
   * Joins an attached container to its gang's private network (gang.ts):
   * GANG_IFACE in its namespace with the rank's address. `member` must have
   * passed validateGangMember. detach() takes it out again.
   */
  async joinGang(containerId: string, member: GangMember): Promise<void> {
    checkContainerId(containerId);
    await this.locked(async () => {
      const lease = this.mustGet(containerId);
      await this.gangs.join(containerId, member, lease.netns);
    });
  }

  /** Removes a container's namespace, veth, rules, resolv.conf and lease, and its gang membership. Absent is fine. */
  async detach(containerId: string): Promise<void> {
    checkContainerId(containerId);
    await this.locked(async () => {
      await this.gangs.leave(containerId);
      const lease = this.ipam.get(containerId);
      if (lease) await this.removeContainer(lease);
      else await rm(this.resolvConfPath(containerId), { force: true });
    });
  }

  /** Replaces a running container's egress policy in one nft transaction. */
  async setPolicy(containerId: string, policy: EgressPolicy): Promise<ContainerNetwork> {
    checkContainerId(containerId);
    const p = validateEgressPolicy(policy);
    return this.locked(() => this.setPolicyLocked(containerId, p));
  }

  /**
   * Replaces the fleet's hosts (addresses or CIDRs) and berth's ports on
   * them: no container reaches those ports there, whatever its policy.
   */
  async setFleet(fleet: { hosts: readonly string[]; ports: readonly number[] }): Promise<void> {
    const f = resolveFleetDeny(fleet.hosts, fleet.ports);
    await this.locked(async () => {
      await applyNft(fleetScript(this.options.table, f));
      this.fleet = f;
    });
  }

  /** The fleet's hosts and berth's ports on them, as denied now. */
  get fleetDeny(): { hosts: string[]; ports: number[] } {
    return { hosts: this.fleet.hosts.map((c) => c.text), ports: [...this.fleet.ports] };
  }

  /** Lets the host (the port proxy) open TCP connections to this container port. */
  async allowInbound(containerId: string, port: number): Promise<void> {
    checkPort(port);
    await this.locked(async () => {
      const lease = this.mustGet(containerId);
      if (lease.inboundPorts.includes(port)) return;
      await applyNft(`${inboundLines("add", this.rulesInput(lease), port).join("\n")}\n`);
      this.ipam.update(containerId, { inboundPorts: [...lease.inboundPorts, port] });
    });
  }

  async revokeInbound(containerId: string, port: number): Promise<void> {
    checkPort(port);
    await this.locked(async () => {
      const lease = this.mustGet(containerId);
      if (!lease.inboundPorts.includes(port)) return;
      await removeNft(inboundLines("delete", this.rulesInput(lease), port));
      this.ipam.update(containerId, { inboundPorts: lease.inboundPorts.filter((p) => p !== port) });
    });
  }

  /**
   * After an agent restart: drops the leases (and namespace, veth, rules) of
   * containers not in `liveContainerIds`, rewrites the live ones' resolv.conf
   * and removes unowned prefix-named leftovers.
   */
  async recover(liveContainerIds: Iterable<string>): Promise<RecoverReport> {
    const live = new Set(liveContainerIds);
    return this.locked(async () => {
      const report: RecoverReport = { kept: [], removed: [], missingNamespace: [], leftovers: [] };
      const namespaces = new Set(await listNetns());
      for (const lease of this.ipam.list()) {
        if (!live.has(lease.containerId)) {
          await this.removeContainer(lease);
          report.removed.push(lease.containerId);
          continue;
        }
        report.kept.push(lease.containerId);
        if (!namespaces.has(lease.netns)) report.missingNamespace.push(lease.containerId);
        await this.writeResolvConf(lease.containerId);
      }
      // Reservations not held by this process's pool (start() drops a previous
      // run's; this catches any other) free their addresses; the namespaces go below.
      for (const r of this.ipam.reservations()) {
        if (!this.unleased.has(r.netns)) await this.destroyNamespace(r);
      }
      report.leftovers = await removeLeftovers(this.options.namePrefix, this.ownedNames());
      // Gang devices of containers that are gone, a previous run's included (by their veths' alias).
      report.leftovers.push(...(await this.gangs.recover(live)));
      // resolv.conf files of reservations a previous run handed out and never attached.
      const keep = new Set([...this.ipam.list().map((l) => l.containerId), ...this.held.keys()]);
      for (const f of await readdir(this.options.resolvDir)) {
        if (f.endsWith(".conf") && !keep.has(f.slice(0, -5)))
          await rm(join(this.options.resolvDir, f), { force: true });
      }
      return report;
    });
  }

  /** Empties the namespace pool. Attached containers, their rules and the bridge stay. */
  async shutdown(): Promise<void> {
    await this.pool.shutdown();
  }

  /** Removes everything: containers' networking, pool, nft tables, bridge, lease file. */
  async destroy(): Promise<void> {
    await this.pool.shutdown();
    await this.locked(async () => {
      for (const ns of this.held.values()) await this.destroyNamespace(ns);
      this.held.clear();
      await this.gangs.destroy();
      for (const lease of this.ipam.list()) await this.removeContainer(lease);
      await deleteNftTables(this.options.table);
      await deleteLink(this.options.bridge);
      await removeLeftovers(this.options.namePrefix, new Set());
      await rm(this.options.stateFile, { force: true });
    });
  }

  private async setPolicyLocked(containerId: string, policy: EgressPolicy): Promise<ContainerNetwork> {
    const before = this.mustGet(containerId);
    // The lease records the intent first, so a crash in between is repaired by the next start().
    const lease = this.ipam.update(containerId, { policy });
    try {
      await applyNft(policyScript(this.rulesInput(lease)));
    } catch (e) {
      this.ipam.update(containerId, { policy: before.policy });
      throw e;
    }
    return this.view(lease);
  }

  private mustGet(containerId: string): Lease {
    const lease = this.ipam.get(containerId);
    if (!lease) throw new BerthError("not_found", `container ${containerId} has no network attachment`);
    return lease;
  }

  /** Rules first, then links, the lease last: a crash half-way leaves a lease that recover() finishes. */
  private async removeContainer(lease: Lease): Promise<void> {
    await this.gangs.leave(lease.containerId);
    await removeNft(containerRemoveStatements(this.rulesInput(lease)));
    await deleteLink(lease.vethHost);
    await deleteNetns(lease.netns);
    await rm(this.resolvConfPath(lease.containerId), { force: true });
    this.ipam.release(lease.containerId);
  }

  /**
   * A pooled namespace made whole ahead of demand: addresses reserved and
   * configured, routes, and its rules with the open policy (anti-spoofing
   * port chain, egress chain, map entries). Its host port stays down until
   * attach brings it up, so no frame passes in either direction before: the
   * open rules of a pooled namespace cannot carry any traffic.
   */
  private async createNamespace(): Promise<Reservation> {
    let suffix: string;
    do suffix = randomBytes(3).toString("hex");
    while (this.ownedNames().has(netnsName(this.options.namePrefix, suffix)));
    const names = {
      netns: netnsName(this.options.namePrefix, suffix),
      vethHost: vethName(this.options.namePrefix, suffix),
    };
    this.unleased.add(names.netns);
    this.unleased.add(names.vethHost);
    let reservation: Reservation | undefined;
    try {
      reservation = this.ipam.reserve(names);
      const o = this.options;
      await createNamespaceWithVeth(names.netns, names.vethHost, o.bridge, {
        ipv4: reservation.ipv4,
        prefix4: o.subnet4.prefix,
        ipv6: reservation.ipv6,
        prefix6: o.subnet6.prefix,
        gateway4: o.subnet4.gateway,
        gateway6: o.subnet6.gateway,
      });
    } catch (e) {
      // createNamespaceWithVeth removed what it made; the reservation goes with it.
      if (reservation) this.ipam.unreserve(names.netns);
      this.unleased.delete(names.netns);
      this.unleased.delete(names.vethHost);
      throw e;
    }
    try {
      await applyNft(containerAddScript(this.pooledRulesInput(reservation)));
    } catch (e) {
      await this.destroyNamespace(reservation).catch(() => {});
      throw e;
    }
    return reservation;
  }

  /** Rules first (they name the veth and addresses), then links, the reservation last. */
  private async destroyNamespace(ns: Reservation): Promise<void> {
    await removeNft(containerRemoveStatements(this.pooledRulesInput(ns)));
    await deleteLink(ns.vethHost);
    await deleteNetns(ns.netns);
    this.ipam.unreserve(ns.netns);
    this.unleased.delete(ns.netns);
    this.unleased.delete(ns.vethHost);
  }

  private ownedNames(): Set<string> {
    const names = new Set(this.unleased);
    for (const l of this.ipam.list()) {
      names.add(l.netns);
      names.add(l.vethHost);
    }
    return names;
  }

  /** Refuses subnets that an address on another interface already falls in. */
  private async checkSubnetsFree(): Promise<void> {
    const addresses = await hostAddresses();
    this.hostAddressCache.set(addresses.map((a) => a.address));
    for (const a of addresses) {
      if (a.ifname === this.options.bridge || a.address.toLowerCase().startsWith("fe80")) continue;
      const theirs = parseCidr(`${a.address}/${a.prefixlen}`);
      for (const ours of [this.options.subnet4, this.options.subnet6]) {
        if (ours.overlaps(theirs)) {
          throw new BerthError(
            "failed_precondition",
            `container subnet ${ours.text} overlaps ${theirs.text} on ${a.ifname}; configure another subnet`,
          );
        }
      }
    }
  }

  private resolvConfPath(containerId: string): string {
    return join(this.options.resolvDir, `${containerId}.conf`);
  }

  private writeResolvConf(containerId: string): Promise<void> {
    return this.writeResolvConfAt(this.resolvConfPath(containerId));
  }

  private async writeResolvConfAt(path: string): Promise<void> {
    const conf = await containerResolvConf({
      sources: this.options.resolvConfSources,
      hostAddresses: await this.hostAddressCache.get(),
      fallbackNameservers: this.options.fallbackNameservers,
    });
    await this.allowNameservers(conf.nameservers);
    // Rewritten in place, not renamed over: a bind mount keeps pointing at the original inode.
    await writeFile(path, conf.text, { mode: 0o644 });
  }

  private async currentNameservers(): Promise<string[]> {
    const conf = await containerResolvConf({
      sources: this.options.resolvConfSources,
      hostAddresses: await this.hostAddressCache.get(),
      fallbackNameservers: this.options.fallbackNameservers,
    });
    return normalizeNameservers(conf.nameservers);
  }

  /** Adds these to the DNS exception (nft sets dns4/dns6); older files may still name earlier ones, which stay. */
  private async allowNameservers(nameservers: string[]): Promise<void> {
    const wanted = normalizeNameservers([...this.nameservers, ...nameservers]);
    if (wanted.join(" ") === this.nameservers.join(" ")) return;
    await applyNft(nameserverScript(this.options.table, wanted));
    this.nameservers = wanted;
  }

  private baseRules() {
    const o = this.options;
    return {
      table: o.table,
      bridge: o.bridge,
      namePrefix: o.namePrefix,
      subnet4: o.subnet4.text,
      subnet6: o.subnet6.text,
      blockedDestinations: o.blockedDestinations,
      guard: { ...o.guard, fleet: this.fleet },
      nameservers: this.nameservers,
    };
  }

  private pooledRulesInput(ns: Reservation): ContainerRulesInput {
    return { table: this.options.table, ...ns, policy: { mode: "open" }, inboundPorts: [] };
  }

  private rulesInput(lease: Lease): ContainerRulesInput {
    return { table: this.options.table, ...lease };
  }

  private view(lease: Lease): ContainerNetwork {
    const o = this.options;
    return {
      containerId: lease.containerId,
      netns: lease.netns,
      netnsPath: netnsPath(lease.netns),
      ipv4: lease.ipv4,
      ipv6: lease.ipv6,
      prefix4: o.subnet4.prefix,
      prefix6: o.subnet6.prefix,
      gateway4: o.subnet4.gateway,
      gateway6: o.subnet6.gateway,
      vethHost: lease.vethHost,
      resolvConfPath: this.resolvConfPath(lease.containerId),
      policy: lease.policy,
      inboundPorts: lease.inboundPorts,
    };
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(fn, fn);
    this.tail = result.catch(() => {});
    return result;
  }
}

const normalizeNameservers = (list: string[]) => [...new Set(list.map((n) => n.toLowerCase()))].sort();
