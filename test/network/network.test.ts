// Container networking with real namespaces, veths, a bridge, nftables and
// real TCP traffic. Needs root, ip, nft and python3.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { test } from "node:test";
import { promisify } from "node:util";
import { waitFor } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import {
  createOutside,
  listenIn,
  NETWORK_COMMANDS,
  probeFrom,
  randomPort,
  spawnIn,
  startTestNetwork,
  sweepAfter,
  Teardown,
  testNames,
} from "./helpers.ts";

const exec = promisify(execFile);

const netnsInode = (pid: number) => statSync(`/proc/${pid}/ns/net`).ino;

function listenOnHost(down: Teardown, host: string, port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const srv = createServer((c) => c.end("host\n"));
    srv.on("error", reject);
    srv.listen(port, host, () => resolve(srv));
    down.defer(() => new Promise((r) => srv.close(r)));
  });
}

test("container networking: egress policies, isolation, inbound, pool", async (t) => {
  if (!needs(t, { root: true, commands: NETWORK_COMMANDS })) return;
  const down = new Teardown(t);
  const names = await testNames();
  sweepAfter(down, names);
  const outside = await createOutside(down, names);
  const { net } = await startTestNetwork(t, down, names, { poolSize: 2 });
  const port = randomPort();
  await listenIn(down, outside.netns, port, "outside");

  const a = await net.attach("ctr-a", { mode: "open" });
  const b = await net.attach("ctr-b", { mode: "open" });

  await t.test("attach gives addresses from the subnets, gateways and a namespace", async () => {
    assert.match(a.ipv4, new RegExp(`^10\\.213\\.${names.octet}\\.\\d+$`));
    assert.notEqual(a.ipv4, a.gateway4);
    assert.notEqual(a.ipv4, b.ipv4);
    assert.equal(a.gateway4, `10.213.${names.octet}.1`);
    assert.ok(a.ipv6.startsWith(`fd42:${names.octet.toString(16)}::`));
    assert.equal(a.netnsPath, `/run/netns/${a.netns}`);
    assert.ok(statSync(a.netnsPath).isFile());
    const { stdout } = await exec("ip", ["-n", a.netns, "-j", "addr", "show", "dev", "eth0"]);
    const addrs = (JSON.parse(stdout) as { addr_info: { local: string }[] }[])[0]!.addr_info.map(
      (x) => x.local,
    );
    assert.ok(addrs.includes(a.ipv4) && addrs.includes(a.ipv6), `eth0 has ${addrs.join(", ")}`);
    const { stdout: routes } = await exec("ip", ["-n", a.netns, "route", "show", "default"]);
    assert.match(routes, new RegExp(`default via ${a.gateway4.replaceAll(".", "\\.")} dev eth0`));
    const resolv = await readFile(a.resolvConfPath, "utf8");
    assert.match(resolv, /^nameserver \S+$/m);
    assert.doesNotMatch(resolv, /nameserver 127\./);
  });

  await t.test("open: the container reaches the outside world over IPv4 and IPv6 (NAT)", async () => {
    assert.equal(await probeFrom(a.netns, outside.primary4, port), "OK outside");
    assert.equal(await probeFrom(a.netns, outside.secondary4, port), "OK outside");
    assert.equal(await probeFrom(a.netns, outside.primary6, port), "OK outside");
  });

  await t.test("switching policy on a live container: block, allow-list, open again", async () => {
    const sleeper = spawnIn(down, a.netns, ["sleep", "600"]);
    const { stdout: inodeText } = await exec("stat", ["-L", "-c", "%i", a.netnsPath]);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(netnsInode(sleeper.pid!), Number(inodeText.trim()), "sleep runs in the container namespace");

    await net.setPolicy("ctr-a", { mode: "block" });
    assert.match(await probeFrom(a.netns, outside.primary4, port), /^FAIL/);
    assert.match(await probeFrom(a.netns, outside.primary6, port), /^FAIL/);
    // ctr-b is untouched by ctr-a's policy.
    assert.equal(await probeFrom(b.netns, outside.primary4, port), "OK outside");

    const allowed = await net.setPolicy("ctr-a", {
      mode: "allow",
      cidrs: [`${outside.primary4}/32`, outside.primary6 + "/128"],
    });
    assert.deepEqual(allowed.policy, {
      mode: "allow",
      cidrs: [`${outside.primary4}/32`, `${outside.primary6}/128`],
    });
    assert.equal(await probeFrom(a.netns, outside.primary4, port), "OK outside");
    assert.equal(await probeFrom(a.netns, outside.primary6, port), "OK outside");
    assert.match(
      await probeFrom(a.netns, outside.secondary4, port),
      /^FAIL/,
      "an address outside the allow-list",
    );
    assert.match(
      await probeFrom(a.netns, outside.secondary6, port),
      /^FAIL/,
      "an IPv6 address outside the allow-list",
    );

    await net.setPolicy("ctr-a", { mode: "open" });
    assert.equal(await probeFrom(a.netns, outside.secondary4, port), "OK outside");

    // Same namespace, same process, nothing recreated.
    assert.equal(sleeper.exitCode, null, "the process in the container is still running");
    assert.equal(netnsInode(sleeper.pid!), Number(inodeText.trim()));
    assert.equal(net.get("ctr-a")?.netns, a.netns);
  });

  await t.test("an invalid policy is refused before anything changes", async () => {
    await net.setPolicy("ctr-b", { mode: "allow", cidrs: [`${outside.primary4}/32`] });
    await assert.rejects(
      net.setPolicy("ctr-b", { mode: "allow", cidrs: ["example.com/32"] }),
      (e: Error & { code?: string }) => e.code === "invalid_request" && /example\.com/.test(e.message),
    );
    assert.deepEqual(net.get("ctr-b")?.policy, { mode: "allow", cidrs: [`${outside.primary4}/32`] });
    assert.match(
      await probeFrom(b.netns, outside.secondary4, port),
      /^FAIL/,
      "old allow-list still in force",
    );
    await net.setPolicy("ctr-b", { mode: "open" });
  });

  await t.test("containers cannot reach each other", async () => {
    const cport = randomPort();
    await listenIn(down, a.netns, cport, "ctr-a");
    await net.allowInbound("ctr-a", cport);
    // The listener works (the host may reach the exposed port) ...
    const { stdout } = await exec("python3", [
      "-c",
      "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2); print(s.recv(100).decode().strip())",
      a.ipv4,
      String(cport),
    ]);
    assert.equal(stdout.trim(), "ctr-a");
    // ... but not another container, over either family, nor through the gateway.
    assert.match(await probeFrom(b.netns, a.ipv4, cport), /^FAIL/);
    assert.match(await probeFrom(b.netns, a.ipv6, cport), /^FAIL/);
    await exec("ip", ["-n", b.netns, "route", "replace", `${a.ipv4}/32`, "via", b.gateway4]);
    assert.match(await probeFrom(b.netns, a.ipv4, cport), /^FAIL/, "routed via the gateway");
  });

  await t.test("containers cannot reach the host, its gateway address or the metadata address", async () => {
    const hport = randomPort();
    await listenOnHost(down, a.gateway4, hport);
    await listenOnHost(down, a.gateway6, hport);
    const { stdout } = await exec("python3", [
      "-c",
      "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2); print(s.recv(100).decode().strip())",
      a.gateway4,
      String(hport),
    ]);
    assert.equal(stdout.trim(), "host", "the host listener answers the host itself");
    assert.match(await probeFrom(a.netns, a.gateway4, hport), /^FAIL/);
    assert.match(await probeFrom(a.netns, a.gateway6, hport), /^FAIL/);
    // An address the host holds on another interface (its end of the outside veth).
    const hostOther = `10.214.${names.octet}.1`;
    await listenOnHost(down, hostOther, hport);
    assert.match(await probeFrom(a.netns, hostOther, hport), /^FAIL/);
    // The outside listener is bound on every address, 169.254.169.254 included, and
    // the route from the container subnet leads there; only the metadata rule stops it.
    const { stdout: route } = await exec("ip", [
      "route",
      "get",
      outside.metadata4,
      "from",
      a.ipv4,
      "iif",
      names.bridge,
    ]);
    assert.match(route, new RegExp(`via 10\\.214\\.${names.octet}\\.2`));
    assert.equal(await probeFrom(a.netns, outside.primary4, port), "OK outside");
    assert.match(await probeFrom(a.netns, outside.metadata4, port), /^FAIL/);
    const { stdout: route6 } = await exec("ip", [
      "-6",
      "route",
      "get",
      outside.metadata6,
      "from",
      a.ipv6,
      "iif",
      names.bridge,
    ]);
    assert.match(route6, new RegExp(`via fd43:${names.octet.toString(16)}::2`));
    assert.equal(await probeFrom(a.netns, outside.primary6, port), "OK outside");
    assert.match(await probeFrom(a.netns, outside.metadata6, port), /^FAIL/);
    await net.setPolicy("ctr-a", { mode: "allow", cidrs: ["169.254.0.0/16"] });
    assert.match(await probeFrom(a.netns, outside.metadata4, port), /^FAIL/, "not even when allow-listed");
    await net.setPolicy("ctr-a", { mode: "open" });
  });

  await t.test("allowInbound: the host reaches an exposed port, also under block_network", async () => {
    const cport = randomPort();
    await listenIn(down, b.netns, cport, "ctr-b");
    const connect = (host: string) =>
      exec("python3", [
        "-c",
        "import socket,sys\ntry:\n s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2); print('OK '+s.recv(100).decode().strip())\nexcept Exception as e: print('FAIL', e)",
        host,
        String(cport),
      ]).then((r) => r.stdout.trim());
    assert.match(await connect(b.ipv4), /^FAIL/, "not exposed yet");
    await net.allowInbound("ctr-b", cport);
    await net.setPolicy("ctr-b", { mode: "block" });
    assert.equal(await connect(b.ipv4), "OK ctr-b");
    assert.equal(await connect(b.ipv6), "OK ctr-b");
    assert.match(await probeFrom(b.netns, outside.primary4, port), /^FAIL/, "still no outbound");
    await net.revokeInbound("ctr-b", cport);
    assert.match(await connect(b.ipv4), /^FAIL/, "revoked");
  });

  await t.test("the pool hands out pre-created namespaces and refills", async () => {
    const before = new Set(
      (await exec("ip", ["netns", "list"])).stdout.split("\n").map((l) => l.split(" ")[0] ?? ""),
    );
    assert.equal(net.poolAvailable, 2);
    const sys = `/sys/class/net/${names.bridge}`;
    const gatewayMac = (await readFile(`${sys}/address`, "utf8")).trim();
    assert.equal((await readFile(`${sys}/addr_assign_type`, "utf8")).trim(), "3", "bridge MAC pinned");
    // Pooled namespaces are addressed ahead of demand, yet reach nothing until attached.
    const attachedNs = new Set(net.list().map((n) => n.netns));
    const pooled = [...before].filter((n) => n.startsWith(`${names.namePrefix}-n`) && !attachedNs.has(n));
    assert.equal(pooled.length, 2, `two pooled namespaces: ${pooled.join(", ")}`);
    const pooledAddrs = new Map<string, string>();
    for (const ns of pooled) {
      const { stdout } = await exec("ip", ["-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"]);
      const addr = /inet (\S+)\//.exec(stdout)?.[1];
      assert.ok(addr, `${ns} has its IPv4 address before attach: ${stdout}`);
      pooledAddrs.set(ns, addr);
      assert.ok(!net.list().some((n) => n.ipv4 === addr), "no container holds a pooled address");
      // Its rules (open policy) are in place ahead of demand, but its host port is down: no frame passes.
      const veth = ns.replace(`${names.namePrefix}-n`, `${names.namePrefix}v`);
      assert.equal((await readFile(`/sys/class/net/${veth}/operstate`, "utf8")).trim(), "down");
      assert.match(await probeFrom(ns, outside.primary4, port), /^FAIL/, "a pooled namespace has no egress");
      assert.match(await probeFrom(ns, net.options.subnet4.gateway, port), /^FAIL/, "nor the host");
    }
    const c = await net.attach("ctr-c", { mode: "open" });
    assert.ok(before.has(c.netns), `${c.netns} existed before attach`);
    assert.equal(c.ipv4, pooledAddrs.get(c.netns), "attach kept the address the pool configured");
    // IFF_UP is set synchronously; operstate follows when the kernel's linkwatch work runs,
    // which a loaded machine can delay: wait for it rather than read it once.
    const flags = Number.parseInt((await readFile(`/sys/class/net/${c.vethHost}/flags`, "utf8")).trim(), 16);
    assert.equal(flags & 1, 1, "attach set the host port administratively up");
    const operstate = () => readFile(`/sys/class/net/${c.vethHost}/operstate`, "utf8").then((s) => s.trim());
    await waitFor(async () => (await operstate()) === "up", {
      timeoutMs: 10_000,
      what: "host port operstate up",
    });
    await waitFor(() => net.poolAvailable === 2, { timeoutMs: 10_000, what: "pool refill" });
    // New ports (random MACs) joined the bridge: the containers' gateway MAC must not move.
    assert.equal((await readFile(`${sys}/address`, "utf8")).trim(), gatewayMac);
    assert.equal(await probeFrom(c.netns, outside.primary4, port), "OK outside");
  });

  await t.test("detach removes namespace, veth, rules and lease, and is idempotent", async () => {
    const c = net.get("ctr-c")!;
    await net.detach("ctr-c");
    await net.detach("ctr-c");
    assert.equal(net.get("ctr-c"), undefined);
    const { stdout: nsList } = await exec("ip", ["netns", "list"]);
    assert.ok(!nsList.includes(c.netns));
    const { stdout: links } = await exec("ip", ["-o", "link", "show"]);
    assert.ok(!links.includes(c.vethHost));
    const { stdout: rules } = await exec("nft", ["list", "table", "inet", names.table]);
    assert.ok(!rules.includes(c.vethHost) && !rules.includes(`${c.ipv4} `), rules);
    await assert.rejects(
      net.setPolicy("ctr-c", { mode: "open" }),
      (e: Error & { code?: string }) => e.code === "not_found",
    );
  });
});
