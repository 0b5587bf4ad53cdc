// Outbound network policy of a container (sandbox/pod `block_network` and
// `allow_list`), validated once here for the SDK routes, the coordinator and
// the agent alike. Spec, Errors §5: block_network with a non-empty allow_list
// is invalid, as is an allow_list over 10 entries or not in CIDR notation.

import { isIPv4, isIPv6 } from "node:net";
import { BerthError } from "./errors.ts";

export type EgressPolicy = { mode: "open" } | { mode: "block" } | { mode: "allow"; cidrs: string[] };

/** The most entries an allow_list may hold (spec, Limits). */
export const MAX_ALLOW_LIST_ENTRIES = 10;

export interface EgressRequest {
  block_network?: boolean | null;
  allow_list?: readonly string[] | null;
}

/** A parsed CIDR: family, network address as a bigint (host bits cleared), prefix length. */
export interface Cidr {
  family: 4 | 6;
  network: bigint;
  prefix: number;
  /** Canonical text: network address (RFC 5952 form for IPv6) + "/" + prefix. */
  text: string;
}

const invalid = (message: string, details?: Record<string, unknown>) =>
  new BerthError("invalid_request", message, details);

/**
 * Turns the public fields into a policy. `block_network=false` with an empty or
 * absent allow_list is open. Allow-list entries are normalised: host bits are
 * cleared (`10.1.2.3/8` → `10.0.0.0/8`, as Go's net.ParseCIDR and most CIDR
 * tools read it), IPv6 is lower-case and compressed, duplicates are dropped
 * (they still count toward the 10-entry limit, which applies to what was sent).
 */
export function resolveEgressPolicy(req: EgressRequest): EgressPolicy {
  const block = req.block_network ?? false;
  if (typeof block !== "boolean") throw invalid("block_network must be a boolean");
  const list = req.allow_list ?? [];
  if (!Array.isArray(list)) throw invalid("allow_list must be a list of CIDR strings or null");
  if (block && list.length > 0) {
    throw invalid("block_network cannot be combined with a non-empty allow_list; use one or the other");
  }
  if (list.length > MAX_ALLOW_LIST_ENTRIES) {
    throw invalid(
      `allow_list has ${list.length} entries; at most ${MAX_ALLOW_LIST_ENTRIES} CIDR entries are allowed`,
      { entries: list.length, max: MAX_ALLOW_LIST_ENTRIES },
    );
  }
  if (block) return { mode: "block" };
  if (list.length === 0) return { mode: "open" };
  const cidrs: string[] = [];
  for (const entry of list) {
    const { text } = parseCidr(entry, "allow_list entry");
    if (!cidrs.includes(text)) cidrs.push(text);
  }
  return { mode: "allow", cidrs };
}

/**
 * Checks a policy value built elsewhere (e.g. decoded from gRPC or a state
 * file) by the same rules, and returns it normalised.
 */
export function validateEgressPolicy(policy: EgressPolicy): EgressPolicy {
  const mode = (policy as { mode?: unknown } | null)?.mode;
  if (mode === "open") return { mode: "open" };
  if (mode === "block") return { mode: "block" };
  if (mode === "allow") {
    const cidrs = (policy as { cidrs?: unknown }).cidrs;
    if (!Array.isArray(cidrs) || cidrs.length === 0) {
      throw invalid("egress policy mode allow needs a non-empty list of CIDRs");
    }
    return resolveEgressPolicy({ block_network: false, allow_list: cidrs as string[] });
  }
  throw invalid(`egress policy mode ${JSON.stringify(mode)} is not one of open, block, allow`);
}

/** The public fields for a policy, e.g. to report a sandbox's current settings. */
export function egressPolicyToRequest(policy: EgressPolicy): {
  block_network: boolean;
  allow_list: string[] | null;
} {
  if (policy.mode === "block") return { block_network: true, allow_list: null };
  if (policy.mode === "allow") return { block_network: false, allow_list: [...policy.cidrs] };
  return { block_network: false, allow_list: null };
}

/**
 * Parses `address/prefix` (IPv4 or IPv6). Rejects a missing prefix, a prefix
 * out of range, hostnames, IPv4 octets with leading zeros (node's isIPv4
 * refuses them: octal ambiguity) and IPv6 zone ids. `what` names the value in the error message.
 */
export function parseCidr(value: unknown, what = "CIDR"): Cidr {
  if (typeof value !== "string") throw invalid(`${what} ${JSON.stringify(value)} is not a string`);
  const shown = JSON.stringify(value);
  const slash = value.indexOf("/");
  if (slash < 0) {
    throw invalid(`${what} ${shown} is not in CIDR notation: expected address/prefix, e.g. 10.0.0.0/8`);
  }
  const addr = value.slice(0, slash).trim();
  const prefixText = value.slice(slash + 1).trim();
  const family = isIPv4(addr) ? 4 : isIPv6(addr) && !addr.includes("%") ? 6 : 0;
  if (family === 0) {
    throw invalid(`${what} ${shown} is not in CIDR notation: "${addr}" is not an IPv4 or IPv6 address`);
  }
  const max = family === 4 ? 32 : 128;
  if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > max) {
    throw invalid(`${what} ${shown} has an invalid prefix length "${prefixText}": must be 0..${max}`);
  }
  const prefix = Number(prefixText);
  const bits = family === 4 ? BigInt(ipv4ToNumber(addr)) : ipv6ToBigInt(addr);
  const network = bits & prefixMask(family, prefix);
  const text = `${family === 4 ? numberToIpv4(Number(network)) : bigIntToIpv6(network)}/${prefix}`;
  return { family, network, prefix, text };
}

export function prefixMask(family: 4 | 6, prefix: number): bigint {
  const width = family === 4 ? 32n : 128n;
  const all = (1n << width) - 1n;
  return (all >> BigInt(prefix)) ^ all;
}

export function ipv4ToNumber(addr: string): number {
  return addr.split(".").reduce((acc, o) => acc * 256 + Number(o), 0);
}

export function numberToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}

/** IPv6 text (validated by the caller with isIPv6) to a 128-bit bigint. */
export function ipv6ToBigInt(addr: string): bigint {
  let text = addr.toLowerCase();
  // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two hex groups.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted?.[1]) {
    const v4 = ipv4ToNumber(dotted[1]);
    text = `${text.slice(0, dotted.index)}${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`;
  }
  const [head = "", tail] = text.split("::");
  const headGroups = head ? head.split(":") : [];
  const tailGroups = tail ? tail.split(":") : [];
  const fill = tail === undefined ? 0 : 8 - headGroups.length - tailGroups.length;
  const groups = [...headGroups, ...Array<string>(fill).fill("0"), ...tailGroups];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(Number.parseInt(g, 16)), 0n);
}

/** 128-bit bigint to RFC 5952 text: lower case, longest run of zero groups compressed. */
export function bigIntToIpv6(value: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((value >> BigInt(i * 16)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 1; // a single zero group is not compressed
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(":");
  const left = hex.slice(0, bestStart).join(":");
  const right = hex.slice(bestStart + bestLen).join(":");
  return `${left}::${right}`;
}
