// Address leases per container, persisted so that an agent restart finds the
// addresses, namespaces, veths and policies of the containers still running.
// The file is the network subsystem's record of truth; it is rewritten whole
// (temp file + fsync + rename) on every change, so a crash leaves the old or
// the new version, never half of one.

import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  writeSync,
} from "node:fs";
import { dirname } from "node:path";
import type { EgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import type { Subnet } from "./subnet.ts";

export interface Lease {
  containerId: string;
  ipv4: string;
  ipv6: string;
  /** Name under /run/netns. */
  netns: string;
  /** Host end of the veth pair, a port of the bridge. */
  vethHost: string;
  policy: EgressPolicy;
  /** TCP ports of the container the host may connect to. */
  inboundPorts: number[];
}

export type LeaseAttachment = Pick<Lease, "netns" | "vethHost" | "policy">;

/**
 * Addresses held by a pooled namespace that no container has yet: the pool
 * configures them ahead of demand, so attaching only binds the reservation
 * to a container. Persisted like leases, so an address held by a namespace
 * is never handed out twice, also across a crash.
 */
export interface Reservation {
  ipv4: string;
  ipv6: string;
  netns: string;
  vethHost: string;
}

interface IpamFile {
  version: 1;
  subnet4: string;
  subnet6: string;
  /** Where the next search starts, so a released address is not handed out again at once. */
  nextOffset: number;
  leases: Lease[];
  /** Absent in files written before pooled namespaces held addresses. */
  reservations?: Reservation[];
}

export class Ipam {
  private readonly leases = new Map<string, Lease>();
  /** Keyed by namespace name. */
  private readonly reserved = new Map<string, Reservation>();
  private nextOffset = 2;

  private constructor(
    readonly file: string,
    readonly subnet4: Subnet,
    readonly subnet6: Subnet,
  ) {}

  /** Loads the lease file, or starts empty when there is none. */
  static load(file: string, subnet4: Subnet, subnet6: Subnet): Ipam {
    const ipam = new Ipam(file, subnet4, subnet6);
    if (!existsSync(file)) return ipam;
    let data: IpamFile;
    try {
      data = JSON.parse(readFileSync(file, "utf8")) as IpamFile;
    } catch (e) {
      throw new BerthError(
        "internal",
        `IPAM file ${file} is unreadable (${(e as Error).message}); fix or remove it`,
      );
    }
    if (data.version !== 1 || !Array.isArray(data.leases)) {
      throw new BerthError("internal", `IPAM file ${file} has an unknown format`);
    }
    const sameSubnets = data.subnet4 === subnet4.text && data.subnet6 === subnet6.text;
    if (!sameSubnets && data.leases.length > 0) {
      throw new BerthError(
        "failed_precondition",
        `IPAM file ${file} holds ${data.leases.length} leases in ${data.subnet4} / ${data.subnet6}, ` +
          `but the configured subnets are ${subnet4.text} / ${subnet6.text}; stop those containers first`,
      );
    }
    for (const lease of data.leases) ipam.leases.set(lease.containerId, { ...lease });
    if (sameSubnets && Array.isArray(data.reservations)) {
      for (const r of data.reservations) ipam.reserved.set(r.netns, { ...r });
    }
    if (sameSubnets && Number.isInteger(data.nextOffset)) ipam.nextOffset = data.nextOffset;
    return ipam;
  }

  get(containerId: string): Lease | undefined {
    const l = this.leases.get(containerId);
    return l && structuredClone(l);
  }

  list(): Lease[] {
    return [...this.leases.values()].map((l) => structuredClone(l));
  }

  /** Leases an IPv4 and the IPv6 at the same offset; an existing lease is returned unchanged. */
  allocate(containerId: string, attachment: LeaseAttachment): Lease {
    const existing = this.leases.get(containerId);
    if (existing) return structuredClone(existing);
    const lease: Lease = {
      containerId,
      ...this.nextFreeAddresses(),
      ...structuredClone(attachment),
      inboundPorts: [],
    };
    this.leases.set(containerId, lease);
    this.save();
    return structuredClone(lease);
  }

  /** Reserves addresses for a pooled namespace; an existing reservation of it is returned unchanged. */
  reserve(names: Pick<Reservation, "netns" | "vethHost">): Reservation {
    const existing = this.reserved.get(names.netns);
    if (existing) return { ...existing };
    const r: Reservation = { ...this.nextFreeAddresses(), netns: names.netns, vethHost: names.vethHost };
    this.reserved.set(r.netns, r);
    this.save();
    return { ...r };
  }

  /**
   * Turns a pooled namespace's reservation into a container's lease, in one
   * write of the file: the addresses are never free or held twice in between.
   */
  bind(netns: string, containerId: string, policy: EgressPolicy): Lease {
    const r = this.reserved.get(netns);
    if (!r) throw new BerthError("internal", `network namespace ${netns} holds no address reservation`);
    if (this.leases.has(containerId)) {
      throw new BerthError("internal", `container ${containerId} already has a network lease`);
    }
    const lease: Lease = { containerId, ...r, policy: structuredClone(policy), inboundPorts: [] };
    this.reserved.delete(netns);
    this.leases.set(containerId, lease);
    this.save();
    return structuredClone(lease);
  }

  /** Frees a pooled namespace's addresses; false when it held none. */
  unreserve(netns: string): boolean {
    if (!this.reserved.delete(netns)) return false;
    this.save();
    return true;
  }

  reservations(): Reservation[] {
    return [...this.reserved.values()].map((r) => ({ ...r }));
  }

  private nextFreeAddresses(): { ipv4: string; ipv6: string } {
    const used = new Set<number>();
    for (const l of [...this.leases.values(), ...this.reserved.values()]) {
      const off = this.subnet4.offsetOf(l.ipv4);
      if (off !== undefined) used.add(off);
    }
    // Offsets 0 (network), 1 (gateway) and the last (IPv4 broadcast) are never leased.
    const first = 2;
    const last = Number(this.subnet4.size) - 2;
    const count = last - first + 1;
    let offset: number | undefined;
    for (let i = 0; i < count; i++) {
      const candidate = first + ((this.nextOffset - first + i + count) % count);
      if (!used.has(candidate)) {
        offset = candidate;
        break;
      }
    }
    if (offset === undefined) {
      throw new BerthError(
        "resource_exhausted",
        `no free container address left in ${this.subnet4.text} (${this.leases.size} leases, ${this.reserved.size} held by pooled namespaces); ` +
          "use a larger subnet4 or stop containers",
      );
    }
    this.nextOffset = offset + 1 > last ? first : offset + 1;
    return { ipv4: this.subnet4.addressAt(offset), ipv6: this.subnet6.addressAt(offset) };
  }

  update(containerId: string, patch: Partial<Pick<Lease, "policy" | "inboundPorts">>): Lease {
    const lease = this.leases.get(containerId);
    if (!lease) throw new BerthError("not_found", `container ${containerId} has no network lease`);
    Object.assign(lease, structuredClone(patch));
    this.save();
    return structuredClone(lease);
  }

  /** Frees a container's addresses; false when it had none. */
  release(containerId: string): boolean {
    if (!this.leases.delete(containerId)) return false;
    this.save();
    return true;
  }

  private save(): void {
    const data: IpamFile = {
      version: 1,
      subnet4: this.subnet4.text,
      subnet6: this.subnet6.text,
      nextOffset: this.nextOffset,
      leases: [...this.leases.values()],
      reservations: [...this.reserved.values()],
    };
    mkdirSync(dirname(this.file), { recursive: true });
    const tmp = `${this.file}.tmp-${process.pid}`;
    const fd = openSync(tmp, "w", 0o600);
    try {
      writeSync(fd, `${JSON.stringify(data, null, 2)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.file);
  }
}
