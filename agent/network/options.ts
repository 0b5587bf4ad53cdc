import { isIPv4 } from "node:net";
import { join } from "node:path";
import { parseCidr, type Cidr } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import { type EgressGuard, resolveEgressGuard } from "./egress-guard.ts";
import { Subnet } from "./subnet.ts";

export interface NetworkOptions {
  /** Directory for the IPAM state file and per-container resolv.conf files. Required. */
  dataDir: string;
  /**
   * Linux bridge the containers' veths join.
   * @default "berth0"
   */
  bridge?: string;
  /**
   * Name of berth's own nftables tables (`table inet NAME` and `table bridge NAME`).
   * Nothing outside these two tables is ever changed.
   * @default "berth"
   */
  table?: string;
  /**
   * Prefix of every namespace (`PREFIX-n<hex>`) and host veth (`PREFIXv<hex>`) this
   * instance creates; cleanup finds leftovers by it. 2-6 characters [a-z0-9], starting with a letter.
   * @default "brt"
   */
  namePrefix?: string;
  /**
   * IPv4 subnet of the bridge; the first host address is the gateway.
   * @default "10.209.0.0/16"
   */
  subnet4?: string;
  /**
   * IPv6 subnet of the bridge (ULA); ::1 is the gateway. Must hold at least as many
   * addresses as subnet4 (container N gets the N-th address of both).
   * @default "fd62:6572:7468::/64"
   */
  subnet6?: string;
  /**
   * Namespaces (with their veth pair on the bridge) kept ready ahead of demand.
   * @default 2
   */
  poolSize?: number;
  /**
   * Delay between an attach taking a pooled namespace and the pool refilling,
   * so the refill's `ip` processes do not compete with that container's start.
   * Each attach pushes it back. 0 refills at once.
   * @default 250
   */
  poolRefillDelayMs?: number;
  /**
   * The host's own addresses (a nameserver on one of them is unreachable from
   * a container) are read with `ip addr` at most this often; attaches in
   * between use the cached list and a refresh runs in the background.
   * 0 reads them on every attach.
   * @default 5000
   */
  hostAddressesMaxAgeMs?: number;
  /**
   * Destinations no container may reach whatever its egress policy (cloud metadata).
   * @default ["169.254.169.254/32", "fd00:ec2::254/128"]
   */
  blockedDestinations?: string[];
  /**
   * Private CIDRs containers may reach (each inside 10.0.0.0/8, 172.16.0.0/12,
   * 192.168.0.0/16, 100.64.0.0/10 or fc00::/7). Every other private address,
   * and every link-local one, is unreachable whatever a container's policy.
   * @default []
   */
  allowedPrivateCidrs?: string[];
  /**
   * Addresses (or CIDRs) of the fleet's hosts: no container reaches
   * fleetPorts on them, whatever else allows it. Replaced at runtime with
   * Network.setFleet().
   * @default []
   */
  fleetHosts?: string[];
  /** berth's ports on fleet hosts. @default [4222, 6222, 8222, 8420, 8421] */
  fleetPorts?: number[];
  /**
   * Nameservers written into containers' resolv.conf when the host has only
   * loopback or host-local resolvers (which containers cannot reach).
   * @default ["1.1.1.1", "9.9.9.9"]
   */
  fallbackNameservers?: string[];
  /**
   * The host resolver configuration, and systemd-resolved's list of upstream servers.
   * @default ["/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"]
   */
  resolvConfSources?: string[];
  /**
   * Set net.ipv4.ip_forward and net.ipv6.conf.all.forwarding to 1 at start.
   * @default true
   */
  enableForwarding?: boolean;
  /**
   * This host's address to the other agents (`berth agent --node-address`):
   * the local end of gangs' VXLAN tunnels (gang.ts). Absent: each gang
   * member's own entry in its hosts list.
   */
  nodeAddress?: string;
}

export interface ResolvedNetworkOptions {
  dataDir: string;
  stateFile: string;
  resolvDir: string;
  bridge: string;
  table: string;
  namePrefix: string;
  subnet4: Subnet;
  subnet6: Subnet;
  poolSize: number;
  poolRefillDelayMs: number;
  hostAddressesMaxAgeMs: number;
  blockedDestinations: Cidr[];
  guard: EgressGuard;
  fallbackNameservers: string[];
  resolvConfSources: string[];
  enableForwarding: boolean;
  nodeAddress?: string;
}

const bad = (message: string) => new BerthError("invalid_request", `network options: ${message}`);

export function resolveNetworkOptions(o: NetworkOptions): ResolvedNetworkOptions {
  if (!o.dataDir) throw bad("dataDir is required");
  const bridge = o.bridge ?? "berth0";
  if (!/^[A-Za-z0-9_.-]{1,15}$/.test(bridge)) throw bad(`bridge "${bridge}" is not a valid interface name`);
  const table = o.table ?? "berth";
  if (!/^[A-Za-z][A-Za-z0-9_]{0,63}$/.test(table))
    throw bad(`table "${table}" must match [A-Za-z][A-Za-z0-9_]*`);
  const namePrefix = o.namePrefix ?? "brt";
  if (!/^[a-z][a-z0-9]{1,5}$/.test(namePrefix)) {
    throw bad(`namePrefix "${namePrefix}" must be 2-6 characters [a-z0-9] starting with a letter`);
  }
  const subnet4 = Subnet.parse(o.subnet4 ?? "10.209.0.0/16");
  const subnet6 = Subnet.parse(o.subnet6 ?? "fd62:6572:7468::/64");
  if (subnet4.family !== 4) throw bad(`subnet4 ${subnet4.text} is not IPv4`);
  if (subnet6.family !== 6) throw bad(`subnet6 ${subnet6.text} is not IPv6`);
  if (subnet4.prefix < 8 || subnet4.prefix > 29) throw bad(`subnet4 ${subnet4.text}: prefix must be 8..29`);
  if (128 - subnet6.prefix < 32 - subnet4.prefix || subnet6.prefix < 48) {
    throw bad(`subnet6 ${subnet6.text} must be /48 or longer and hold at least as many addresses as subnet4`);
  }
  const poolSize = o.poolSize ?? 2;
  if (!Number.isInteger(poolSize) || poolSize < 0 || poolSize > 64) throw bad("poolSize must be 0..64");
  const delay = (v: number | undefined, d: number, name: string) => {
    const n = v ?? d;
    if (!Number.isInteger(n) || n < 0 || n > 600_000) throw bad(`${name} must be an integer 0..600000 (ms)`);
    return n;
  };
  const poolRefillDelayMs = delay(o.poolRefillDelayMs, 250, "poolRefillDelayMs");
  const hostAddressesMaxAgeMs = delay(o.hostAddressesMaxAgeMs, 5000, "hostAddressesMaxAgeMs");
  const blockedDestinations = (o.blockedDestinations ?? ["169.254.169.254/32", "fd00:ec2::254/128"]).map(
    (c) => parseCidr(c, "blockedDestinations entry"),
  );
  const fallbackNameservers = o.fallbackNameservers ?? ["1.1.1.1", "9.9.9.9"];
  if (o.nodeAddress !== undefined && !isIPv4(o.nodeAddress))
    throw bad(
      `nodeAddress ${JSON.stringify(o.nodeAddress)} must be an IPv4 address (gangs' VXLAN runs over IPv4)`,
    );
  return {
    dataDir: o.dataDir,
    stateFile: join(o.dataDir, "ipam.json"),
    resolvDir: join(o.dataDir, "resolv"),
    bridge,
    table,
    namePrefix,
    subnet4,
    subnet6,
    poolSize,
    poolRefillDelayMs,
    hostAddressesMaxAgeMs,
    blockedDestinations,
    guard: resolveEgressGuard(o),
    fallbackNameservers,
    resolvConfSources: o.resolvConfSources ?? ["/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"],
    enableForwarding: o.enableForwarding ?? true,
    ...(o.nodeAddress !== undefined ? { nodeAddress: o.nodeAddress } : {}),
  };
}
