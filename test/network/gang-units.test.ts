// A gang member's checks, names, MACs, environment and labels: no root, no
// devices (gang.test.ts makes real gang networks between two namespaces).

import assert from "node:assert/strict";
import { test } from "node:test";
import { applyGang } from "../../agent/host/gang.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { validNodeAddress } from "../../coordinator/fleet/index.ts";
import { resolveRunRequest } from "../../agent/host/request.ts";
import {
  gangBridgeName,
  gangLinkPattern,
  gangMac,
  gangVethPattern,
  gangVxlanName,
  validateGangMember,
} from "../../agent/network/gang-member.ts";
import type { GangMember } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { GangLabels } from "../../shared/gang.ts";

const member: GangMember = {
  id: "gang-1",
  vni: 4242,
  rank: 1,
  size: 2,
  hosts: ["192.0.2.10", "192.0.2.11"],
  subnet: "10.251.0.0/24",
  masterPort: 29500,
};

const refused = (field: string, re: RegExp) => (e: unknown) => {
  assert.ok(e instanceof BerthError, `not a BerthError: ${e}`);
  assert.equal(e.code, "invalid_request");
  assert.match(e.message, re);
  assert.equal((e.details as { field?: string } | undefined)?.field, field);
  return true;
};

test("a valid gang member passes as a copy", () => {
  const out = validateGangMember(member);
  assert.deepEqual(out, member);
  assert.notEqual(out.hosts, member.hosts);
  assert.deepEqual(
    validateGangMember({ ...member, vni: 16_777_215, rank: 0, size: 1, hosts: ["10.0.0.1"] }),
    {
      ...member,
      vni: 16_777_215,
      rank: 0,
      size: 1,
      hosts: ["10.0.0.1"],
    },
  );
  const big = {
    ...member,
    size: 64,
    rank: 63,
    hosts: Array.from({ length: 64 }, (_, i) => `10.0.1.${i + 1}`),
  };
  assert.deepEqual(validateGangMember(big), big);
});

test("a bad gang member is invalid_request naming its field", () => {
  const bad = (o: Record<string, unknown>, field: string, re: RegExp) =>
    assert.throws(() => validateGangMember({ ...member, ...o }), refused(field, re));
  assert.throws(() => validateGangMember("x"), refused("gang", /gang must be/));
  bad({ id: "" }, "gang.id", /gang\.id must be/);
  bad({ id: "a b" }, "gang.id", /gang\.id must be/);
  bad({ vni: 0 }, "gang.vni", /gang\.vni must be an integer 1\.\.16777215, got 0/);
  bad({ vni: 16_777_216 }, "gang.vni", /got 16777216/);
  bad({ vni: 1.5 }, "gang.vni", /gang\.vni/);
  bad({ size: 0 }, "gang.size", /gang\.size must be an integer 1\.\.64/);
  bad({ size: 65 }, "gang.size", /gang\.size must be an integer 1\.\.64, got 65/);
  bad({ rank: 2 }, "gang.rank", /gang\.rank must be an integer 0\.\.1 \(size 2\), got 2/);
  bad({ rank: -1 }, "gang.rank", /gang\.rank/);
  bad({ hosts: ["192.0.2.10"] }, "gang.hosts", /one host address per rank \(2\)/);
  bad({ hosts: "192.0.2.10" }, "gang.hosts", /gang\.hosts/);
  bad({ hosts: ["192.0.2.10", "2001:db8::1"] }, "gang.hosts[1]", /gang\.hosts\[1\] must be an IPv4 address/);
  bad({ hosts: ["host-a", "192.0.2.11"] }, "gang.hosts[0]", /must be an IPv4 address, got "host-a"/);
  bad({ subnet: "10.251.0.0/16" }, "gang.subnet", /gang\.subnet must be an IPv4 \/24/);
  bad({ subnet: "10.251.0.7/24" }, "gang.subnet", /gang\.subnet/);
  bad({ subnet: "10.251.300.0/24" }, "gang.subnet", /gang\.subnet/);
  bad({ masterPort: 0 }, "gang.masterPort", /gang\.masterPort must be an integer 1\.\.65535/);
});

test("the agent checks a request's gang before anything starts, and keeps it", () => {
  const base = { image: "python:3.11", args: [], cpu: 0.25, memoryBytes: 128 << 20 };
  assert.deepEqual(resolveRunRequest({ ...base, gang: member }).gang, member);
  assert.equal(resolveRunRequest(base).gang, undefined);
  assert.throws(
    () => resolveRunRequest({ ...base, gang: { ...member, vni: 0 } }),
    refused("gang.vni", /gang\.vni/),
  );
});

test("gang device names fit in 15 characters and are told apart from the agent's others", () => {
  const p = "abcdef";
  assert.equal(gangBridgeName(p, 16_777_215), "abcdefgbffffff");
  assert.equal(gangVxlanName(p, 1), "abcdefgx000001");
  for (const n of [gangBridgeName(p, 4242), gangVxlanName(p, 4242), `${p}gv0a1b2c`]) {
    assert.ok(n.length <= 15, n);
    assert.ok(gangLinkPattern(p).test(n), n);
  }
  assert.ok(gangVethPattern(p).test(`${p}gv0a1b2c`));
  assert.ok(!gangVethPattern(p).test(gangBridgeName(p, 1)));
  // The agent's own bridge, veths and namespaces are not gang devices.
  for (const n of [`${p}br`, `${p}v0a1b2c`, `${p}-n0a1b2c`, "berth0"])
    assert.ok(!gangLinkPattern(p).test(n), n);
});

test("a rank's MAC is fixed by vni and rank, unicast and locally administered", () => {
  assert.equal(gangMac(0x123456, 0), "02:12:34:56:00:01");
  assert.equal(gangMac(1, 63), "02:00:00:01:3f:01");
  assert.notEqual(gangMac(7, 0), gangMac(7, 1));
  assert.notEqual(gangMac(7, 0), gangMac(8, 0));
});

test("a gang member gets the gang's environment and labels over the request's own", () => {
  const req = resolveRunRequest({
    image: "python:3.11",
    args: [],
    cpu: 0.25,
    memoryBytes: 128 << 20,
    env: { RANK: "9", KEEP: "1" },
    labels: { app: "x" },
    gang: member,
  });
  const out = applyGang(req);
  assert.equal(out.env.KEEP, "1");
  assert.equal(out.env.RANK, "1");
  assert.equal(out.env.WORLD_SIZE, "2");
  assert.equal(out.env.MASTER_ADDR, "10.251.0.1");
  assert.equal(out.env.MASTER_PORT, "29500");
  assert.equal(out.env.BERTH_GANG_ADDRS, "10.251.0.1,10.251.0.2");
  assert.equal(out.env.NCCL_SOCKET_IFNAME, "gang0");
  assert.deepEqual(out.labels, {
    app: "x",
    [GangLabels.gangId]: "gang-1",
    [GangLabels.rank]: "1",
    [GangLabels.size]: "2",
  });
  // The request itself is left as it was; one without a gang passes unchanged.
  assert.equal(req.env.RANK, "9");
  const plain = resolveRunRequest({ image: "python:3.11", args: [], cpu: 0.25, memoryBytes: 128 << 20 });
  assert.equal(applyGang(plain), plain);
});

test("the agent's node address: --node-address, else --advertise's IPv4 host unless loopback", () => {
  assert.equal(resolveAgentOptions({ nodeAddress: "192.0.2.5" }).nodeAddress, "192.0.2.5");
  assert.equal(
    resolveAgentOptions({ advertiseAddress: "127.0.0.1:8421", nodeAddress: "192.0.2.5" }).nodeAddress,
    "192.0.2.5",
  );
  assert.equal(resolveAgentOptions({ advertiseAddress: "192.0.2.6:8421" }).nodeAddress, "192.0.2.6");
  for (const advertiseAddress of [
    "127.0.0.1:8421",
    "gpu-1.example:8421",
    "[2001:db8::1]:8421",
    "0.0.0.0:8421",
  ])
    assert.equal(resolveAgentOptions({ advertiseAddress }).nodeAddress, undefined, advertiseAddress);
  assert.equal(resolveAgentOptions({ hostname: "box" }).nodeAddress, undefined);
  for (const nodeAddress of ["127.0.0.1", "0.0.0.0", "2001:db8::1", "host-a", ""])
    assert.throws(
      () => resolveAgentOptions({ nodeAddress }),
      (e: unknown) =>
        e instanceof BerthError && e.code === "invalid_request" && /--node-address/.test(e.message),
      JSON.stringify(nodeAddress),
    );
});

test("the coordinator keeps a heartbeat's node address only when another agent can tunnel to it", () => {
  assert.equal(validNodeAddress("10.0.0.9"), true);
  for (const bad of ["127.0.0.1", "0.0.0.0", "::1", "2001:db8::1", "host-a", 7, null])
    assert.equal(validNodeAddress(bad), false, String(bad));
});
