// What a gang member is on this host, before any device exists: the check of
// RunContainerRequest.gang, the names of a gang's devices (at most 15
// characters with a 6-character prefix: PREFIXgb<vni> the bridge, PREFIXgx<vni>
// the VXLAN device, vni as 6 hex digits; PREFIXgv<hex> a member's host veth)
// and each rank's MAC. gang.ts makes the devices.

import { isIPv4 } from "node:net";
import type { GangMember } from "../../api/index.ts";
import { invalid } from "../../shared/errors.ts";
import { MAX_GANG_NODES } from "../../shared/gang.ts";

/** VXLAN's overhead over an IPv4 underlay: outer IP, UDP, VXLAN and inner Ethernet headers. */
export const VXLAN_OVERHEAD = 50;

/** MTU of the gang interface when no underlay says otherwise: 1500 less VXLAN_OVERHEAD. */
export const GANG_MTU = 1500 - VXLAN_OVERHEAD;

const MAX_VNI = 0xff_ffff;
const hex6 = (n: number) => n.toString(16).padStart(6, "0");

export const gangBridgeName = (prefix: string, vni: number) => `${prefix}gb${hex6(vni)}`;
export const gangVxlanName = (prefix: string, vni: number) => `${prefix}gx${hex6(vni)}`;
export const gangVethPattern = (prefix: string) => new RegExp(`^${prefix}gv[0-9a-f]{6}$`);
/** Every gang device of this prefix; group 1 is the kind (b, x, v), group 2 the hex. */
export const gangLinkPattern = (prefix: string) => new RegExp(`^${prefix}g([bxv])([0-9a-f]{6})$`);
/** nft's glob for the gang bridges of this prefix (nft-rules.ts). */
export const gangBridgeGlob = (prefix: string) => `${prefix}gb*`;

/**
 * Rank's MAC on the gang interface, fixed by vni and rank (locally
 * administered unicast): each host then forwards a frame for a remote rank to
 * that rank's host alone instead of flooding it to every host of the gang.
 */
export function gangMac(vni: number, rank: number): string {
  const bytes = [0x02, (vni >> 16) & 0xff, (vni >> 8) & 0xff, vni & 0xff, rank & 0xff, 0x01];
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(":");
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

const isInt = (v: unknown, min: number, max: number): v is number =>
  typeof v === "number" && Number.isInteger(v) && v >= min && v <= max;

/**
 * Checks a RunContainerRequest.gang as it arrived (gRPC or the edge CLI,
 * so no type is trusted) and returns a copy; a bad one is invalid_request
 * naming the field.
 */
export function validateGangMember(v: unknown): GangMember {
  const bad = (field: string, why: string) => invalid(`gang.${field} ${why}`, { field: `gang.${field}` });
  if (!isObject(v))
    throw invalid("gang must be { id, vni, rank, size, hosts, subnet, masterPort }", { field: "gang" });
  if (typeof v.id !== "string" || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/.test(v.id))
    throw bad("id", `must be 1-128 characters [A-Za-z0-9_.-], got ${JSON.stringify(v.id)}`);
  if (!isInt(v.vni, 1, MAX_VNI))
    throw bad("vni", `must be an integer 1..${MAX_VNI}, got ${JSON.stringify(v.vni)}`);
  if (!isInt(v.size, 1, MAX_GANG_NODES))
    throw bad("size", `must be an integer 1..${MAX_GANG_NODES}, got ${JSON.stringify(v.size)}`);
  if (!isInt(v.rank, 0, v.size - 1))
    throw bad("rank", `must be an integer 0..${v.size - 1} (size ${v.size}), got ${JSON.stringify(v.rank)}`);
  if (!Array.isArray(v.hosts) || v.hosts.length !== v.size)
    throw bad("hosts", `must list one host address per rank (${v.size}), got ${JSON.stringify(v.hosts)}`);
  v.hosts.forEach((h, i) => {
    if (typeof h !== "string" || !isIPv4(h))
      throw bad(`hosts[${i}]`, `must be an IPv4 address, got ${JSON.stringify(h)}`);
  });
  const subnet = typeof v.subnet === "string" ? /^(\d+\.\d+\.\d+\.\d+)\/24$/.exec(v.subnet) : null;
  if (!subnet || !isIPv4(subnet[1] ?? "") || !(subnet[1] ?? "").endsWith(".0"))
    throw bad("subnet", `must be an IPv4 /24 such as 10.251.0.0/24, got ${JSON.stringify(v.subnet)}`);
  if (!isInt(v.masterPort, 1, 65535))
    throw bad("masterPort", `must be an integer 1..65535, got ${JSON.stringify(v.masterPort)}`);
  return {
    id: v.id,
    vni: v.vni,
    rank: v.rank,
    size: v.size,
    hosts: [...(v.hosts as string[])],
    subnet: v.subnet as string,
    masterPort: v.masterPort,
  };
}
