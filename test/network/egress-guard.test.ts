// What no container reaches whatever its policy (agent/network/egress-guard.ts):
// the operator's options checked, the fleet's hosts and ports derived from
// the URLs an agent joined, and the rules' order. Pure logic: no root needed.
// The traffic itself is tested from runc containers in test/host/egress-safety.test.ts.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  DEFAULT_FLEET_PORTS,
  resolveAllowedPrivate,
  resolveEgressGuard,
  resolveFleetDeny,
} from "../../agent/network/egress-guard.ts";
import { fleetDenyOf } from "../../agent/network/fleet-hosts.ts";
import { fullRuleset } from "../../agent/network/nft-rules.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { parseCidr } from "../../shared/egress.ts";

const invalidWith = (re: RegExp) => (e: unknown) => {
  const err = e as { code?: string; message?: string };
  assert.equal(err.code, "invalid_request");
  assert.match(err.message ?? "", re);
  return true;
};

test("allowed private CIDRs must lie inside a private range; link-local and public ones are refused", () => {
  assert.deepEqual(
    resolveAllowedPrivate(["10.1.0.0/16", "10.1.2.0/24", "fd00:1::/64", "100.64.0.0/10"]).map((c) => c.text),
    ["10.1.0.0/16", "fd00:1::/64", "100.64.0.0/10"],
    "nested entries are dropped",
  );
  assert.throws(
    () => resolveAllowedPrivate(["169.254.169.254/32"]),
    invalidWith(/169\.254\.169\.254\/32 is not inside a private range/),
  );
  assert.throws(() => resolveAllowedPrivate(["fe80::/64"]), invalidWith(/link-local ones never are/));
  assert.throws(
    () => resolveAllowedPrivate(["8.8.8.0/24"]),
    invalidWith(/public addresses are reachable without it/),
  );
  assert.throws(() => resolveAllowedPrivate(["10.0.0.0/7"]), invalidWith(/10\.0\.0\.0\/7 is not inside/));
  assert.throws(() => resolveAllowedPrivate(["10.0.0.1"]), invalidWith(/not in CIDR notation/));
});

test("fleet hosts are addresses or CIDRs, ports 1..65535", () => {
  assert.deepEqual(resolveFleetDeny(["192.0.2.7", "2001:db8::1", "198.51.100.0/24"], [8420, 4222, 8420]), {
    hosts: [parseCidr("192.0.2.7/32"), parseCidr("2001:db8::1/128"), parseCidr("198.51.100.0/24")],
    ports: [4222, 8420],
  });
  assert.throws(() => resolveFleetDeny(["coordinator.example"], []), invalidWith(/coordinator\.example/));
  assert.throws(
    () => resolveFleetDeny([], [0]),
    invalidWith(/fleetPorts entry 0 must be an integer 1\.\.65535/),
  );
  assert.deepEqual(resolveEgressGuard({}).fleet.ports, DEFAULT_FLEET_PORTS);
});

test("the agent's --allow-private and --fleet-host are checked at start, naming the flag", () => {
  const o = resolveAgentOptions({ allowPrivate: ["192.168.10.0/24"], fleetHosts: ["10.0.0.5"] });
  assert.deepEqual(o.network.allowedPrivateCidrs, ["192.168.10.0/24"]);
  assert.deepEqual(o.network.fleetHosts, ["10.0.0.5"]);
  assert.deepEqual(
    resolveAgentOptions({}).network.allowedPrivateCidrs,
    [],
    "closed unless the operator opens",
  );
  assert.throws(
    () => resolveAgentOptions({ allowPrivate: ["1.2.3.0/24"] }),
    invalidWith(/^--allow-private: .*1\.2\.3\.0\/24/),
  );
  assert.throws(() => resolveAgentOptions({ fleetHosts: ["x/y"] }), invalidWith(/^--fleet-host: /));
});

test("the fleet an agent knows: the coordinator's and NATS servers' addresses and ports, names resolved", async () => {
  const warnings: string[] = [];
  const fleet = await fleetDenyOf({
    urls: ["https://coord.example:9443", "nats://10.0.0.7:4333,nats://[fd00::7]:4444", "not a url"],
    hosts: ["192.0.2.0/24"],
    ports: [8421, 0, undefined, 9100],
    warn: (m) => warnings.push(m),
    resolve: async (host) => {
      if (host === "coord.example") return ["203.0.113.5", "2001:db8::5"];
      throw new Error("NXDOMAIN");
    },
  });
  assert.deepEqual(fleet.hosts.sort(), ["10.0.0.7", "192.0.2.0/24", "2001:db8::5", "203.0.113.5", "fd00::7"]);
  assert.deepEqual(fleet.ports, [4222, 4333, 4444, 6222, 8222, 8420, 8421, 9100, 9443]);
  assert.match(warnings.join("\n"), /"not a url" is not a URL/);
  const unresolved = await fleetDenyOf({
    urls: ["http://gone.example:8420"],
    hosts: [],
    ports: [],
    warn: (m) => warnings.push(m),
    resolve: async () => {
      throw new Error("NXDOMAIN");
    },
  });
  assert.deepEqual(unresolved.hosts, []);
  assert.match(warnings.at(-1) ?? "", /cannot resolve gone\.example/);
});

test("rules: operator denials come before every container's own chain, the allowed private CIDRs excepted", () => {
  const guard = resolveEgressGuard({
    allowedPrivateCidrs: ["10.5.0.0/16", "fd00:5::/64"],
    fleetHosts: ["10.5.0.9"],
  });
  const script = fullRuleset(
    {
      table: "t",
      bridge: "br",
      namePrefix: "tx",
      subnet4: "10.209.0.0/16",
      subnet6: "fd62::/64",
      blockedDestinations: [parseCidr("169.254.169.254/32")],
      guard,
      nameservers: ["10.5.0.53", "fd00:5::53"],
    },
    [],
  );
  const lines = script.split("\n");
  const at = (re: RegExp) => {
    const i = lines.findIndex((l) => re.test(l));
    assert.ok(i >= 0, `no line matches ${re}:\n${script}`);
    return i;
  };
  const metadata = at(/from_ctr ip daddr 169\.254\.169\.254\/32 reject/);
  const fleet = at(/from_ctr ip daddr @fleet4 meta l4proto \{ tcp, udp \} th dport @fleet_ports reject/);
  const dns = at(/from_ctr ip daddr @dns4 .* th dport 53 ip saddr vmap @egress4/);
  const priv = at(
    /from_ctr ip daddr \{ 169\.254\.0\.0\/16, 10\.0\.0\.0\/8, 172\.16\.0\.0\/12, 192\.168\.0\.0\/16, 100\.64\.0\.0\/10 \} ip daddr != \{ 10\.5\.0\.0\/16 \} reject/,
  );
  const priv6 = at(/from_ctr ip6 daddr \{ fe80::\/10, fc00::\/7 \} ip6 daddr != \{ fd00:5::\/64 \} reject/);
  const policy = at(/from_ctr ip saddr vmap @egress4$/);
  assert.ok(metadata < fleet && fleet < dns && dns < priv && priv < priv6 && priv6 < policy, script);
  at(/add element inet t fleet4 \{ 10\.5\.0\.9\/32 \}/);
  at(/add element inet t fleet_ports \{ 4222, 6222, 8222, 8420, 8421 \}/);
  at(/add element inet t dns4 \{ 10\.5\.0\.53 \}/);
  at(/add element inet t dns6 \{ fd00:5::53 \}/);
  // Gangs (agent/network/gang.ts): no container sends VXLAN anywhere; a gang bridge is never routed through, nor reaches the host.
  assert.ok(at(/from_ctr udp dport 4789 reject/) < policy, script);
  at(/filter_forward iifname "txgb\*" oifname != "txgb\*" drop/);
  at(/filter_forward oifname "txgb\*" iifname != "txgb\*" drop/);
  at(/filter_input iifname "txgb\*" drop/);
});
