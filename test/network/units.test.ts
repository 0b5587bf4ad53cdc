// Logic of the network subsystem that needs no root: IPAM, the namespace
// pool (with an in-memory create/destroy), resolv.conf choice, subnets,
// options validation and the nft script builders.

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Ipam } from "../../agent/network/ipam.ts";
import {
  containerAddScript,
  containerRemoveStatements,
  policyScript,
} from "../../agent/network/nft-rules.ts";
import { HostAddressCache } from "../../agent/network/host-addresses.ts";
import { resolveNetworkOptions } from "../../agent/network/options.ts";
import { NamespacePool, type PooledNamespace } from "../../agent/network/pool.ts";
import { containerResolvConf } from "../../agent/network/resolv.ts";
import { Subnet } from "../../agent/network/subnet.ts";
import { sleep, waitFor } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";

const attachment = (n: number) => ({
  netns: `tx-n${n}`,
  vethHost: `txv${n}`,
  policy: { mode: "open" as const },
});

test("Ipam hands out distinct addresses, never network, gateway or broadcast, until exhausted", (t) => {
  const file = join(tempDir(t), "ipam.json");
  const ipam = Ipam.load(file, Subnet.parse("10.50.0.0/29"), Subnet.parse("fd50::/64"));
  // A /29 has 8 addresses: .0 network, .1 gateway, .7 broadcast, so .2-.6 are leasable.
  const got = [1, 2, 3, 4, 5].map((n) => ipam.allocate(`c${n}`, attachment(n)));
  assert.deepEqual(
    got.map((l) => l.ipv4),
    ["10.50.0.2", "10.50.0.3", "10.50.0.4", "10.50.0.5", "10.50.0.6"],
  );
  assert.deepEqual(
    got.map((l) => l.ipv6),
    ["fd50::2", "fd50::3", "fd50::4", "fd50::5", "fd50::6"],
  );
  assert.equal(ipam.allocate("c1", attachment(9)).ipv4, "10.50.0.2", "an existing lease is returned as is");
  assert.throws(
    () => ipam.allocate("c6", attachment(6)),
    (e: Error & { code?: string }) => e.code === "resource_exhausted" && /10\.50\.0\.0\/29/.test(e.message),
  );
  assert.equal(ipam.release("c3"), true);
  assert.equal(ipam.release("c3"), false);
  assert.equal(ipam.allocate("c6", attachment(6)).ipv4, "10.50.0.4", "the freed address is reused");
});

test("Ipam persists atomically and reloads; released addresses are not reused at once", (t) => {
  const dir = tempDir(t);
  const file = join(dir, "ipam.json");
  const s4 = Subnet.parse("10.51.0.0/24");
  const s6 = Subnet.parse("fd51::/64");
  const ipam = Ipam.load(file, s4, s6);
  const a = ipam.allocate("a", attachment(1));
  ipam.allocate("b", attachment(2));
  ipam.update("a", { policy: { mode: "block" }, inboundPorts: [8080] });
  ipam.release("b");
  assert.ok(!readFileSync(file, "utf8").includes("tmp"));

  const again = Ipam.load(file, s4, s6);
  assert.deepEqual(again.get("a"), { ...a, policy: { mode: "block" }, inboundPorts: [8080] });
  assert.equal(again.get("b"), undefined);
  assert.equal(again.allocate("c", attachment(3)).ipv4, "10.51.0.4", "continues after the last handed out");

  assert.throws(
    () => Ipam.load(file, Subnet.parse("10.52.0.0/24"), s6),
    /holds 2 leases in 10\.51\.0\.0\/24/,
  );
  writeFileSync(file, "{not json");
  assert.throws(() => Ipam.load(file, s4, s6), /unreadable/);
});

test("Ipam reservations of pooled namespaces count as used, persist, and bind to a container in one step", (t) => {
  const file = join(tempDir(t), "ipam.json");
  const s4 = Subnet.parse("10.53.0.0/29");
  const s6 = Subnet.parse("fd53::/64");
  const ipam = Ipam.load(file, s4, s6);
  const r1 = ipam.reserve({ netns: "tx-n1", vethHost: "txv1" });
  assert.deepEqual(r1, { ipv4: "10.53.0.2", ipv6: "fd53::2", netns: "tx-n1", vethHost: "txv1" });
  assert.deepEqual(ipam.reserve({ netns: "tx-n1", vethHost: "txv1" }), r1, "reserving again returns it");
  const r2 = ipam.reserve({ netns: "tx-n2", vethHost: "txv2" });
  assert.equal(ipam.allocate("c3", attachment(3)).ipv4, "10.53.0.4", "reserved addresses are not leased");

  // A crash here: the reload sees both reservations, and never hands their addresses out again.
  const again = Ipam.load(file, s4, s6);
  assert.deepEqual(again.reservations(), [r1, r2]);
  const bound = again.bind("tx-n1", "ctr-1", { mode: "block" });
  assert.deepEqual(bound, {
    containerId: "ctr-1",
    ipv4: "10.53.0.2",
    ipv6: "fd53::2",
    netns: "tx-n1",
    vethHost: "txv1",
    policy: { mode: "block" },
    inboundPorts: [],
  });
  const onDisk = JSON.parse(readFileSync(file, "utf8")) as { leases: unknown[]; reservations: unknown[] };
  assert.equal(onDisk.leases.length, 2);
  assert.deepEqual(onDisk.reservations, [r2], "bind moved the reservation to the lease in the same write");
  assert.throws(() => again.bind("tx-n1", "ctr-x", { mode: "open" }), /holds no address reservation/);
  assert.throws(() => again.bind("tx-n2", "ctr-1", { mode: "open" }), /already has a network lease/);

  // .5 and .6 are left; once taken (one leased, one reserved) the /29 is full.
  again.allocate("c5", attachment(5));
  again.reserve({ netns: "tx-n6", vethHost: "txv6" });
  assert.throws(
    () => again.reserve({ netns: "tx-n7", vethHost: "txv7" }),
    (e: Error & { code?: string }) =>
      e.code === "resource_exhausted" && /2 held by pooled namespaces/.test(e.message),
  );
  assert.equal(again.unreserve("tx-n2"), true);
  assert.equal(again.unreserve("tx-n2"), false);
  assert.equal(again.allocate("c7", attachment(7)).ipv4, "10.53.0.3", "an unreserved address is free again");
  assert.equal(Ipam.load(file, s4, s6).reservations().length, 1);
});

test("NamespacePool keeps N ready, hands them out, refills and cleans up", async () => {
  let made = 0;
  const live = new Set<string>();
  const pool = new NamespacePool({
    size: 2,
    create: async () => {
      await sleep(5);
      const ns = { netns: `ns${++made}`, vethHost: `v${made}` };
      live.add(ns.netns);
      return ns;
    },
    destroy: async (ns: PooledNamespace) => {
      live.delete(ns.netns);
    },
  });
  await pool.fill();
  assert.equal(pool.available, 2);
  assert.deepEqual([...live], ["ns1", "ns2"]);
  const first = await pool.take();
  assert.equal(first.netns, "ns1", "a pre-created namespace");
  await pool.take();
  const third = await pool.take(); // the pool may be empty now: made on demand or from the refill
  assert.ok(third.netns.startsWith("ns"));
  await pool.fill();
  assert.equal(pool.available, 2);
  await pool.shutdown();
  assert.equal(pool.available, 0);
  assert.ok(live.has(first.netns) && live.has(third.netns), "taken namespaces are the caller's to destroy");
  assert.equal(made - live.size, 2, "shutdown destroyed exactly the two ready ones");
});

test("NamespacePool with a refill delay refills only after it, once per burst, and never after shutdown", async () => {
  let made = 0;
  const pool = new NamespacePool({
    size: 2,
    refillDelayMs: 50,
    create: async () => ({ netns: `ns${++made}`, vethHost: `v${made}` }),
    destroy: async () => {},
  });
  await pool.fill();
  assert.equal(made, 2);
  await pool.take();
  await pool.take();
  await sleep(5);
  assert.equal(made, 2, "no creation right after take(): it would compete with the start");
  assert.equal(pool.available, 0);
  await waitFor(() => pool.available === 2, { timeoutMs: 5_000, what: "the delayed refill" });
  assert.equal(made, 4);
  const onDemand = await pool.take();
  await pool.take();
  assert.equal((await pool.take()).netns, "ns5", "an empty pool still creates on demand");
  assert.equal(onDemand.netns, "ns3");
  await pool.shutdown();
  await sleep(100);
  assert.equal(made, 5, "a refill scheduled before shutdown never runs");
});

test("HostAddressCache reads once, serves the cache within maxAge, refreshes in the background after", async () => {
  let now = 1_000;
  let reads = 0;
  let current = ["10.0.0.1"];
  let release: (() => void) | undefined;
  const cache = new HostAddressCache(
    async () => {
      reads++;
      if (reads > 1) await new Promise<void>((r) => (release = r));
      return [...current];
    },
    5_000,
    () => {},
    () => now,
  );
  assert.deepEqual(await Promise.all([cache.get(), cache.get()]), [["10.0.0.1"], ["10.0.0.1"]]);
  assert.equal(reads, 1, "concurrent first gets share one read");
  now += 5_000;
  assert.deepEqual(await cache.get(), ["10.0.0.1"]);
  assert.equal(reads, 1, "within maxAge: no read");
  current = ["10.0.0.2"];
  now += 1;
  assert.deepEqual(await cache.get(), ["10.0.0.1"], "stale: the old list now, a refresh behind it");
  assert.deepEqual(await cache.get(), ["10.0.0.1"]);
  assert.equal(reads, 2, "one refresh in flight, not one per get");
  release?.();
  await waitFor(async () => (await cache.get())[0] === "10.0.0.2", { timeoutMs: 5_000, what: "refresh" });
  cache.set(["192.0.2.1"]);
  assert.deepEqual(await cache.get(), ["192.0.2.1"]);

  let uncachedReads = 0;
  const uncached = new HostAddressCache(async () => [`a${++uncachedReads}`], 0);
  assert.deepEqual(
    [await uncached.get(), await uncached.get()],
    [["a1"], ["a2"]],
    "maxAge 0 reads every time",
  );
});

test("resolv.conf for containers skips loopback and host resolvers", async (t) => {
  const dir = tempDir(t);
  const host = join(dir, "resolv.conf");
  const resolved = join(dir, "resolved.conf");
  writeFileSync(host, "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch example.internal\n");
  writeFileSync(resolved, "nameserver 10.0.0.2\nnameserver fe80::1%eth0\nnameserver 2001:db8::53\n");
  const r = await containerResolvConf({
    sources: [host, resolved],
    hostAddresses: [],
    fallbackNameservers: ["1.1.1.1"],
  });
  assert.deepEqual(r.nameservers, ["10.0.0.2", "2001:db8::53"]);
  assert.equal(r.origin, resolved);
  assert.match(r.text, /^search example\.internal$/m);
  assert.match(r.text, /^options edns0 trust-ad$/m);

  writeFileSync(host, "nameserver 192.168.1.5\n");
  const own = await containerResolvConf({
    sources: [host],
    hostAddresses: ["192.168.1.5"],
    fallbackNameservers: ["9.9.9.9"],
  });
  assert.deepEqual(own.nameservers, ["9.9.9.9"], "a resolver on the host's own address is unreachable");
  assert.equal(own.origin, "fallback");
  const missing = await containerResolvConf({
    sources: [join(dir, "nope")],
    hostAddresses: [],
    fallbackNameservers: ["1.1.1.1"],
  });
  assert.deepEqual(missing.nameservers, ["1.1.1.1"]);
});

test("Subnet arithmetic and overlap", () => {
  const s = Subnet.parse("10.60.1.0/24");
  assert.equal(s.gateway, "10.60.1.1");
  assert.equal(s.offsetOf("10.60.1.200"), 200);
  assert.equal(s.offsetOf("10.60.2.1"), undefined);
  assert.ok(s.overlaps(Subnet.parse("10.60.0.0/16")));
  assert.ok(!s.overlaps(Subnet.parse("10.61.0.0/16")));
  const s6 = Subnet.parse("fd62:6572:7468::/64");
  assert.equal(s6.addressAt(258), "fd62:6572:7468::102");
  assert.equal(s6.offsetOf("fd62:6572:7468::102"), 258);
});

test("network options are validated once", () => {
  const o = resolveNetworkOptions({ dataDir: "/tmp/x" });
  assert.equal(o.bridge, "berth0");
  assert.equal(o.table, "berth");
  assert.equal(o.subnet4.text, "10.209.0.0/16");
  assert.equal(o.poolSize, 2);
  assert.equal(o.poolRefillDelayMs, 250);
  assert.equal(o.hostAddressesMaxAgeMs, 5000);
  assert.equal(resolveNetworkOptions({ dataDir: "/tmp/x", poolRefillDelayMs: 0 }).poolRefillDelayMs, 0);
  for (const bad of [
    { poolRefillDelayMs: -1 },
    { poolRefillDelayMs: 1.5 },
    { hostAddressesMaxAgeMs: Number.NaN },
    { bridge: "a-name-that-is-too-long" },
    { table: "bad-name" },
    { namePrefix: "Toolong1" },
    { subnet4: "fd00::/64" },
    { subnet4: "10.0.0.0/30" },
    { subnet6: "fd00::/120", subnet4: "10.0.0.0/16" },
    { poolSize: -1 },
    { blockedDestinations: ["169.254.169.254"] },
  ]) {
    assert.throws(
      () => resolveNetworkOptions({ dataDir: "/tmp/x", ...bad }),
      /invalid|must|not|prefix/,
      JSON.stringify(bad),
    );
  }
});

test("nft scripts: per-container chain, policy swap in one flush+refill, removal in dependency order", () => {
  const c = {
    table: "berth",
    vethHost: "brtv0a0b0c",
    ipv4: "10.209.0.2",
    ipv6: "fd62:6572:7468::2",
    policy: { mode: "allow" as const, cidrs: ["10.0.0.0/8", "2001:db8::/32"] },
    inboundPorts: [8080],
  };
  const add = containerAddScript(c);
  assert.match(add, /add element inet berth egress4 \{ 10\.209\.0\.2 : jump c_brtv0a0b0c \}/);
  assert.match(add, /add rule inet berth c_brtv0a0b0c ip daddr 10\.0\.0\.0\/8 accept/);
  assert.match(add, /add rule inet berth c_brtv0a0b0c ip6 daddr 2001:db8::\/32 accept/);
  assert.match(add, /add element inet berth inbound4 \{ 10\.209\.0\.2 \. 8080 \}/);
  const swap = policyScript({ ...c, policy: { mode: "block" } })
    .trim()
    .split("\n");
  assert.deepEqual(swap, [
    "flush chain inet berth c_brtv0a0b0c",
    "add rule inet berth c_brtv0a0b0c reject with icmpx type admin-prohibited",
  ]);
  const rm = containerRemoveStatements(c);
  assert.ok(
    rm.findIndex((s) => s.includes("egress4")) < rm.findIndex((s) => s.startsWith("delete chain inet")),
  );
});
