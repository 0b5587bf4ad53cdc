// What no container reaches whatever its egress policy says (docs/networking.md,
// "Safe by default"): link-local addresses, the private ranges the operator
// did not allow, and berth's own ports (coordinator, NATS, agent) on every
// host of the fleet. A container's allow_list only narrows what is left; it
// never re-opens any of this. Pure values and validation; nft-rules.ts turns
// them into rules that come before every container's own chain.

import { parseCidr, type Cidr } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";

/** Link-local: cloud metadata (169.254.169.254), AWS's resolver, a link's own neighbours. Never reachable. */
export const LINK_LOCAL = ["169.254.0.0/16", "fe80::/10"];

/** Private and shared ranges (RFC 1918, RFC 6598 carrier-grade NAT, RFC 4193 unique local): reachable only where the operator allows. */
export const PRIVATE_RANGES = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"];

/** berth's ports: coordinator HTTP 8420, agent gRPC 8421, NATS client 4222, cluster 6222, monitoring 8222. */
export const DEFAULT_FLEET_PORTS = [4222, 6222, 8222, 8420, 8421];

export interface EgressGuard {
  /** Link-local and private ranges, each family's list without nested duplicates. */
  denied: Cidr[];
  /** The operator's exceptions, each inside one of PRIVATE_RANGES. */
  allowedPrivate: Cidr[];
  fleet: FleetDeny;
}

export interface FleetDeny {
  hosts: Cidr[];
  ports: number[];
}

const bad = (message: string) => new BerthError("invalid_request", `network options: ${message}`);

/** Whether `inner` lies wholly inside `outer`. */
export function cidrContains(outer: Cidr, inner: Cidr): boolean {
  if (outer.family !== inner.family || outer.prefix > inner.prefix) return false;
  const bits = BigInt((outer.family === 4 ? 32 : 128) - outer.prefix);
  return inner.network >> bits === outer.network >> bits;
}

/** The list without entries another entry already holds (two CIDR blocks either nest or are disjoint). */
export function withoutNested(list: Cidr[]): Cidr[] {
  const out: Cidr[] = [];
  for (const c of list) {
    if (out.some((o) => cidrContains(o, c))) continue;
    for (let i = out.length - 1; i >= 0; i--) if (cidrContains(c, out[i] as Cidr)) out.splice(i, 1);
    out.push(c);
  }
  return out;
}

/** An address or a CIDR; a bare address is that one host. */
export function parseHostOrCidr(entry: string, what: string): Cidr {
  if (typeof entry !== "string") throw bad(`${what} ${JSON.stringify(entry)} is not a string`);
  if (entry.includes("/")) return parseCidr(entry, what);
  return parseCidr(`${entry}/${entry.includes(":") ? 128 : 32}`, what);
}

/** Checks the operator's private exceptions: each must be inside a private range (public addresses need none; link-local cannot be opened). */
export function resolveAllowedPrivate(entries: readonly string[]): Cidr[] {
  if (!Array.isArray(entries)) throw bad("allowedPrivateCidrs must be a list of CIDRs");
  const ranges = PRIVATE_RANGES.map((r) => parseCidr(r));
  return withoutNested(
    entries.map((entry) => {
      const c = parseCidr(entry, "allowedPrivateCidrs entry");
      if (!ranges.some((r) => cidrContains(r, c)))
        throw bad(
          `allowedPrivateCidrs entry ${c.text} is not inside a private range (${PRIVATE_RANGES.join(", ")}); public addresses are reachable without it, and link-local ones never are`,
        );
      return c;
    }),
  );
}

export function resolveFleetDeny(hosts: readonly string[], ports: readonly number[]): FleetDeny {
  if (!Array.isArray(hosts)) throw bad("fleetHosts must be a list of addresses or CIDRs");
  if (!Array.isArray(ports)) throw bad("fleetPorts must be a list of TCP/UDP ports");
  for (const p of ports)
    if (!Number.isInteger(p) || p < 1 || p > 65535)
      throw bad(`fleetPorts entry ${p} must be an integer 1..65535`);
  return {
    hosts: withoutNested(hosts.map((h) => parseHostOrCidr(h, "fleetHosts entry"))),
    ports: [...new Set(ports)].sort((a, b) => a - b),
  };
}

export function resolveEgressGuard(o: {
  allowedPrivateCidrs?: readonly string[];
  fleetHosts?: readonly string[];
  fleetPorts?: readonly number[];
}): EgressGuard {
  return {
    denied: withoutNested([...LINK_LOCAL, ...PRIVATE_RANGES].map((c) => parseCidr(c))),
    allowedPrivate: resolveAllowedPrivate(o.allowedPrivateCidrs ?? []),
    fleet: resolveFleetDeny(o.fleetHosts ?? [], o.fleetPorts ?? DEFAULT_FLEET_PORTS),
  };
}
