// nftables scripts for berth's two tables. Pure text builders: the caller
// feeds each script to one `nft -f -`, which the kernel applies as a single
// transaction (all of it or none of it).
//
// table inet NAME    forward/input/output filtering for the bridge, NAT, and
//                    one chain per container (`c_<veth>`) holding its egress
//                    policy, reached through the egress4/egress6 verdict maps
//                    keyed by the container's source address. Before those,
//                    what no policy opens (egress-guard.ts): link-local,
//                    private ranges the operator did not allow, berth's
//                    ports on fleet hosts (the fleet4/fleet6/fleet_ports sets).
// table bridge NAME  layer 2: anti-spoofing per port (`p_<veth>`, reached via
//                    the `ports` map) and no frames between container ports.

import type { Cidr, EgressPolicy } from "../../shared/egress.ts";
import { parseCidr } from "../../shared/egress.ts";
import { GANG_VXLAN_PORT } from "../../shared/gang.ts";
import type { EgressGuard, FleetDeny } from "./egress-guard.ts";
import { gangBridgeGlob } from "./gang-member.ts";

export interface BaseRulesInput {
  table: string;
  bridge: string;
  namePrefix: string;
  subnet4: string;
  subnet6: string;
  blockedDestinations: Cidr[];
  /** What no policy opens: link-local, private ranges but the operator's, berth's ports on the fleet. */
  guard: EgressGuard;
  /** The nameservers containers' resolv.conf names: DNS (port 53) to them passes the private-range rule. */
  nameservers: string[];
}

export interface ContainerRulesInput {
  table: string;
  vethHost: string;
  ipv4: string;
  ipv6: string;
  policy: EgressPolicy;
  inboundPorts: number[];
}

const REJECT = "reject with icmpx type admin-prohibited";
const ND_TYPES = "{ nd-neighbor-solicit, nd-neighbor-advert }";

const daddrMatch = (c: Cidr) => `${c.family === 4 ? "ip" : "ip6"} daddr ${c.text}`;

export const containerChain = (vethHost: string) => `c_${vethHost}`;
export const portChain = (vethHost: string) => `p_${vethHost}`;

/**
 * Replaces both tables wholesale (add + delete + add in one transaction, so
 * there is no moment without rules) and re-adds every container's rules.
 */
export function fullRuleset(base: BaseRulesInput, containers: ContainerRulesInput[]): string {
  const { table: t, bridge: br } = base;
  const vethGlob = `"${base.namePrefix}v*"`;
  const gangGlob = `"${gangBridgeGlob(base.namePrefix)}"`;
  const lines: string[] = [
    `add table inet ${t}`,
    `delete table inet ${t}`,
    `add table bridge ${t}`,
    `delete table bridge ${t}`,
    `add table inet ${t}`,
    `add map inet ${t} egress4 { type ipv4_addr : verdict; }`,
    `add map inet ${t} egress6 { type ipv6_addr : verdict; }`,
    `add set inet ${t} inbound4 { type ipv4_addr . inet_service; }`,
    `add set inet ${t} inbound6 { type ipv6_addr . inet_service; }`,
    `add set inet ${t} fleet4 { type ipv4_addr; flags interval; auto-merge; }`,
    `add set inet ${t} fleet6 { type ipv6_addr; flags interval; auto-merge; }`,
    `add set inet ${t} fleet_ports { type inet_service; }`,
    `add set inet ${t} dns4 { type ipv4_addr; }`,
    `add set inet ${t} dns6 { type ipv6_addr; }`,
    // Container → anywhere but the host (routed through the host). First what no policy opens.
    `add chain inet ${t} from_ctr`,
    ...base.blockedDestinations.map((c) => `add rule inet ${t} from_ctr ${daddrMatch(c)} ${REJECT}`),
    // VXLAN to any host: a container could inject frames into some gang's network (gang.ts).
    `add rule inet ${t} from_ctr udp dport ${GANG_VXLAN_PORT} ${REJECT}`,
    `add rule inet ${t} from_ctr ip daddr @fleet4 meta l4proto { tcp, udp } th dport @fleet_ports ${REJECT}`,
    `add rule inet ${t} from_ctr ip6 daddr @fleet6 meta l4proto { tcp, udp } th dport @fleet_ports ${REJECT}`,
    // DNS to the resolv.conf nameservers, often on a private address: the container's own policy decides.
    `add rule inet ${t} from_ctr ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 ip saddr vmap @egress4`,
    `add rule inet ${t} from_ctr ip6 daddr @dns6 meta l4proto { tcp, udp } th dport 53 ip6 saddr vmap @egress6`,
    ...guardLines(t, base.guard),
    `add rule inet ${t} from_ctr ip saddr vmap @egress4`,
    `add rule inet ${t} from_ctr ip6 saddr vmap @egress6`,
    // A source address no container holds (spoofed, or a pool namespace).
    `add rule inet ${t} from_ctr drop`,
    // Anywhere → container: only replies to what the container opened.
    `add chain inet ${t} to_ctr`,
    `add rule inet ${t} to_ctr ct state established,related accept`,
    `add rule inet ${t} to_ctr drop`,
    `add chain inet ${t} filter_forward { type filter hook forward priority filter; policy accept; }`,
    // Container ↔ container, routed via the gateway or bridged through br_netfilter.
    `add rule inet ${t} filter_forward iifname "${br}" oifname "${br}" drop`,
    `add rule inet ${t} filter_forward iifname "${br}" jump from_ctr`,
    `add rule inet ${t} filter_forward oifname "${br}" jump to_ctr`,
    // A gang bridge (gang.ts) only bridges, between its members and its VXLAN device: with
    // br_netfilter that is in and out of the same bridge. Nothing is routed into or out of one.
    `add rule inet ${t} filter_forward iifname ${gangGlob} oifname != ${gangGlob} drop`,
    `add rule inet ${t} filter_forward oifname ${gangGlob} iifname != ${gangGlob} drop`,
    // Container → the host itself (any of its addresses): nothing but replies and neighbour discovery.
    `add chain inet ${t} ctr_to_host`,
    `add rule inet ${t} ctr_to_host ct state established,related accept`,
    `add rule inet ${t} ctr_to_host icmpv6 type ${ND_TYPES} accept`,
    `add rule inet ${t} ctr_to_host ${REJECT}`,
    `add chain inet ${t} filter_input { type filter hook input priority filter; policy accept; }`,
    `add rule inet ${t} filter_input iifname "${br}" jump ctr_to_host`,
    // A gang bridge has no address, and the host answers nothing that arrives on one either.
    `add rule inet ${t} filter_input iifname ${gangGlob} drop`,
    // Host → container: only ports opened with allowInbound.
    `add chain inet ${t} host_to_ctr`,
    `add rule inet ${t} host_to_ctr ct state established,related accept`,
    `add rule inet ${t} host_to_ctr icmpv6 type ${ND_TYPES} accept`,
    `add rule inet ${t} host_to_ctr icmp type { destination-unreachable, time-exceeded, parameter-problem } accept`,
    `add rule inet ${t} host_to_ctr icmpv6 type { destination-unreachable, packet-too-big, time-exceeded } accept`,
    `add rule inet ${t} host_to_ctr ip daddr . tcp dport @inbound4 accept`,
    `add rule inet ${t} host_to_ctr ip6 daddr . tcp dport @inbound6 accept`,
    `add rule inet ${t} host_to_ctr ${REJECT}`,
    `add chain inet ${t} filter_output { type filter hook output priority filter; policy accept; }`,
    `add rule inet ${t} filter_output oifname "${br}" jump host_to_ctr`,
    `add chain inet ${t} nat_postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
    `add rule inet ${t} nat_postrouting ip saddr ${base.subnet4} oifname != "${br}" masquerade`,
    `add rule inet ${t} nat_postrouting ip6 saddr ${base.subnet6} oifname != "${br}" masquerade`,
    `add table bridge ${t}`,
    `add map bridge ${t} ports { type ifname : verdict; }`,
    `add chain bridge ${t} bridge_prerouting { type filter hook prerouting priority -200; policy accept; }`,
    `add rule bridge ${t} bridge_prerouting iifname vmap @ports`,
    // Ports of pool namespaces not yet given to a container.
    `add rule bridge ${t} bridge_prerouting iifname ${vethGlob} drop`,
    `add chain bridge ${t} bridge_forward { type filter hook forward priority -200; policy accept; }`,
    `add rule bridge ${t} bridge_forward iifname ${vethGlob} oifname ${vethGlob} drop`,
  ];
  lines.push(...fleetLines(t, base.guard.fleet), ...nameserverLines(t, base.nameservers));
  for (const c of containers) lines.push(...containerAddLines(c));
  return `${lines.join("\n")}\n`;
}

/** Link-local and private destinations, less the operator's exceptions: rejected. */
function guardLines(t: string, g: EgressGuard): string[] {
  const lines: string[] = [];
  for (const [family, match] of [
    [4, "ip daddr"],
    [6, "ip6 daddr"],
  ] as const) {
    const denied = g.denied.filter((c) => c.family === family).map((c) => c.text);
    const allowed = g.allowedPrivate.filter((c) => c.family === family).map((c) => c.text);
    if (denied.length === 0) continue;
    const except = allowed.length > 0 ? ` ${match} != { ${allowed.join(", ")} }` : "";
    lines.push(`add rule inet ${t} from_ctr ${match} { ${denied.join(", ")} }${except} ${REJECT}`);
  }
  return lines;
}

function fleetLines(t: string, fleet: FleetDeny): string[] {
  const v4 = fleet.hosts.filter((c) => c.family === 4).map((c) => c.text);
  const v6 = fleet.hosts.filter((c) => c.family === 6).map((c) => c.text);
  return [
    ...(v4.length > 0 ? [`add element inet ${t} fleet4 { ${v4.join(", ")} }`] : []),
    ...(v6.length > 0 ? [`add element inet ${t} fleet6 { ${v6.join(", ")} }`] : []),
    ...(fleet.ports.length > 0 ? [`add element inet ${t} fleet_ports { ${fleet.ports.join(", ")} }`] : []),
  ];
}

function nameserverLines(t: string, nameservers: string[]): string[] {
  const unique = [...new Set(nameservers.map((n) => n.toLowerCase()))];
  const v4 = unique.filter((n) => !n.includes(":"));
  const v6 = unique.filter((n) => n.includes(":"));
  return [
    ...(v4.length > 0 ? [`add element inet ${t} dns4 { ${v4.join(", ")} }`] : []),
    ...(v6.length > 0 ? [`add element inet ${t} dns6 { ${v6.join(", ")} }`] : []),
  ];
}

/** Replaces the fleet's hosts and ports in one transaction. */
export function fleetScript(table: string, fleet: FleetDeny): string {
  const lines = [
    `flush set inet ${table} fleet4`,
    `flush set inet ${table} fleet6`,
    `flush set inet ${table} fleet_ports`,
    ...fleetLines(table, fleet),
  ];
  return `${lines.join("\n")}\n`;
}

/** Replaces the nameservers DNS may reach in one transaction. */
export function nameserverScript(table: string, nameservers: string[]): string {
  const lines = [
    `flush set inet ${table} dns4`,
    `flush set inet ${table} dns6`,
    ...nameserverLines(table, nameservers),
  ];
  return `${lines.join("\n")}\n`;
}

function policyLines(table: string, vethHost: string, policy: EgressPolicy): string[] {
  const chain = containerChain(vethHost);
  const rule = (r: string) => `add rule inet ${table} ${chain} ${r}`;
  if (policy.mode === "open") return [rule("accept")];
  if (policy.mode === "block") return [rule(REJECT)];
  return [...policy.cidrs.map((c) => rule(`${daddrMatch(parseCidr(c))} accept`)), rule(REJECT)];
}

function containerAddLines(c: ContainerRulesInput): string[] {
  const t = c.table;
  const chain = containerChain(c.vethHost);
  const pchain = portChain(c.vethHost);
  const lines = [
    `add chain inet ${t} ${chain}`,
    `flush chain inet ${t} ${chain}`,
    ...policyLines(t, c.vethHost, c.policy),
    `add element inet ${t} egress4 { ${c.ipv4} : jump ${chain} }`,
    `add element inet ${t} egress6 { ${c.ipv6} : jump ${chain} }`,
    `add chain bridge ${t} ${pchain}`,
    `flush chain bridge ${t} ${pchain}`,
    `add rule bridge ${t} ${pchain} ether type ip ip saddr != ${c.ipv4} drop`,
    `add rule bridge ${t} ${pchain} ether type ip6 ip6 saddr != { ${c.ipv6}, fe80::/10, :: } drop`,
    `add rule bridge ${t} ${pchain} ether type arp arp saddr ip != ${c.ipv4} drop`,
    `add rule bridge ${t} ${pchain} accept`,
    `add element bridge ${t} ports { "${c.vethHost}" : jump ${pchain} }`,
  ];
  for (const port of c.inboundPorts) lines.push(...inboundLines("add", c, port));
  return lines;
}

/** Adds (or refreshes) one container's chains, map entries and inbound ports. */
export function containerAddScript(c: ContainerRulesInput): string {
  return `${containerAddLines(c).join("\n")}\n`;
}

/** Swaps a container's egress policy: flush and refill its chain in one transaction. */
export function policyScript(c: Pick<ContainerRulesInput, "table" | "vethHost" | "policy">): string {
  const lines = [
    `flush chain inet ${c.table} ${containerChain(c.vethHost)}`,
    ...policyLines(c.table, c.vethHost, c.policy),
  ];
  return `${lines.join("\n")}\n`;
}

export function inboundLines(
  op: "add" | "delete",
  c: Pick<ContainerRulesInput, "table" | "ipv4" | "ipv6">,
  port: number,
) {
  return [
    `${op} element inet ${c.table} inbound4 { ${c.ipv4} . ${port} }`,
    `${op} element inet ${c.table} inbound6 { ${c.ipv6} . ${port} }`,
  ];
}

/**
 * Statements that remove one container's rules, in dependency order (map
 * entries before the chains they jump to). Returned as a list so a caller can
 * retry them one by one when some are already gone.
 */
export function containerRemoveStatements(c: ContainerRulesInput): string[] {
  const t = c.table;
  return [
    ...c.inboundPorts.flatMap((port) => inboundLines("delete", c, port)),
    `delete element inet ${t} egress4 { ${c.ipv4} }`,
    `delete element inet ${t} egress6 { ${c.ipv6} }`,
    `delete element bridge ${t} ports { "${c.vethHost}" }`,
    `delete chain inet ${t} ${containerChain(c.vethHost)}`,
    `delete chain bridge ${t} ${portChain(c.vethHost)}`,
  ];
}
