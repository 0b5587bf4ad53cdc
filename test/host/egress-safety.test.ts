// Egress that is safe by default, from inside real
// runc containers: listeners this test puts in its own "outside" namespace at
// the cloud metadata address, another link-local address, private-range
// addresses, and two addresses standing for other hosts of the fleet (one
// public-looking, one in a private range the operator allowed) with a
// coordinator port open. A default container and one whose allow_list names
// every one of them reach none of what is denied; a private CIDR the operator
// allowed and a public address are reachable; the fleet's hosts can be
// replaced at runtime; DNS reaches a private nameserver on port 53 only.
// Needs root, runc, skopeo, umoci, docker-registry, ip, nft, python3.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { needs } from "../helpers/env.ts";
import { createOutside, listenIn, randomPort, type TestNames } from "../network/helpers.ts";
import { execAll, HOST_COMMANDS, hostHarness, MiB, PROBE } from "./harness.ts";

const exec = promisify(execFile);

/** Addresses of the test: 198.18.0.0/15 (benchmarking, RFC 2544) is neither private nor link-local: "the internet". */
function plan(names: TestNames) {
  const x = names.octet;
  const hx = x.toString(16);
  return {
    public4: `198.18.${x}.2`,
    fleetPublic4: `198.18.${x}.3`,
    allowedPrivate4: `10.214.${x}.2`,
    deniedPrivate4: `10.214.${x}.3`,
    allowedPrivate6: `fd43:${hx}::2`,
    deniedPrivate6: `fd43:${hx}::3`,
    linkLocal4: `169.254.77.${x}`,
    metadata4: "169.254.169.254",
  };
}

test("egress from runc containers: link-local, private ranges and fleet ports stay closed", {
  timeout: 300_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  let resolvFile = "";
  const h = await hostHarness(t, {
    network: (names) => {
      const a = plan(names);
      // The host's resolver sits on a private address: DNS to it must still work.
      resolvFile = join("/tmp", `berth-egress-resolv-${names.namePrefix}.conf`);
      writeFileSync(resolvFile, `nameserver ${a.deniedPrivate4}\n`);
      return {
        // The operator allows one private host of each family; the rest of 10.214/16 and fd43::/16 stays closed.
        allowedPrivateCidrs: [`${a.allowedPrivate4}/32`, `${a.allowedPrivate6}/128`],
        fleetHosts: [a.fleetPublic4, a.allowedPrivate4],
        resolvConfSources: [resolvFile],
      };
    },
  });
  h.down.defer(() => exec("rm", ["-f", resolvFile]));
  const a = plan(h.names);
  const x = h.names.octet;
  const outside = await createOutside(h.down, h.names);

  // The outside namespace also holds the public-looking addresses and another link-local one.
  const table = String(21000 + x);
  h.down.defer(async () => {
    await exec("ip", ["rule", "del", "priority", table]).catch(() => {});
    await exec("ip", ["route", "flush", "table", table]).catch(() => {});
    await exec("ip", ["route", "del", `198.18.${x}.0/24`]).catch(() => {});
  });
  for (const addr of [`${a.public4}/32`, `${a.fleetPublic4}/32`, `${a.linkLocal4}/32`])
    await exec("ip", ["-n", outside.netns, "addr", "add", addr, "dev", "eth0"]);
  await exec("ip", ["route", "add", `198.18.${x}.0/24`, "via", outside.primary4]);
  // Link-local is routed to the outside only for the test's container subnet, like createOutside's metadata route.
  await exec("ip", ["route", "add", `${a.linkLocal4}/32`, "via", outside.primary4, "table", table]);
  await exec("ip", [
    "rule",
    "add",
    "priority",
    table,
    "from",
    h.names.subnet4,
    "to",
    `${a.linkLocal4}/32`,
    "table",
    table,
  ]);

  const port = randomPort();
  const coordinatorPort = 8420;
  await listenIn(h.down, outside.netns, port, "outside");
  await listenIn(h.down, outside.netns, coordinatorPort, "coordinator");
  await listenIn(h.down, outside.netns, 53, "dns");

  const run = (egress: Parameters<typeof h.host.runContainer>[0]["egress"]) =>
    h.host.runContainer({
      image: h.imageRef,
      args: ["python3", "-c", "import time; time.sleep(600)"],
      cpu: 0.5,
      memoryBytes: 256 * MiB,
      ...(egress ? { egress } : {}),
    });
  const probe = async (id: string, host: string, p: number) =>
    (await execAll(await h.host.exec(id, { args: ["python3", "-c", PROBE, host, String(p)] }))).stdout.trim();

  const open = await run(undefined);
  const listed = await run({
    mode: "allow",
    cidrs: [
      `${a.metadata4}/32`,
      "169.254.0.0/16",
      `${a.deniedPrivate4}/32`,
      `${a.deniedPrivate6}/128`,
      `${a.fleetPublic4}/32`,
      `${a.allowedPrivate4}/32`,
      `${a.public4}/32`,
    ],
  });

  for (const [name, c] of [
    ["default container", open],
    ["container whose allow_list names them", listed],
  ] as const) {
    await t.test(
      `${name}: metadata, link-local, private ranges and fleet ports are unreachable`,
      async () => {
        assert.match(await probe(c.id, a.metadata4, port), /^FAIL/, "the metadata address");
        assert.match(await probe(c.id, a.linkLocal4, port), /^FAIL/, "another link-local address");
        assert.match(await probe(c.id, a.deniedPrivate4, port), /^FAIL/, "a private address not allowed");
        assert.match(
          await probe(c.id, a.deniedPrivate6, port),
          /^FAIL/,
          "a unique-local IPv6 address not allowed",
        );
        assert.match(
          await probe(c.id, a.fleetPublic4, coordinatorPort),
          /^FAIL/,
          "another host's coordinator port",
        );
        assert.match(
          await probe(c.id, a.allowedPrivate4, coordinatorPort),
          /^FAIL/,
          "a fleet host's coordinator port inside an allowed private range",
        );
      },
    );
    await t.test(
      `${name}: the internet, other ports of fleet hosts and the allowed private CIDR are reachable`,
      async () => {
        assert.equal(await probe(c.id, a.public4, port), "OK outside");
        assert.equal(await probe(c.id, a.fleetPublic4, port), "OK outside", "a fleet host's other ports");
        assert.equal(await probe(c.id, a.allowedPrivate4, port), "OK outside", "the operator's private CIDR");
        assert.equal(await probe(c.id, a.deniedPrivate4, 53), "OK dns", "DNS to the private nameserver");
      },
    );
  }

  await t.test("only the allowed private host of each family is open, not its neighbours", async () => {
    assert.equal(await probe(open.id, a.allowedPrivate6, port), "OK outside");
    const narrow = await run({ mode: "allow", cidrs: [`${a.public4}/32`] });
    assert.equal(await probe(narrow.id, a.public4, port), "OK outside");
    assert.match(await probe(narrow.id, a.allowedPrivate4, port), /^FAIL/, "the allow_list still narrows");
    assert.match(
      await probe(narrow.id, a.deniedPrivate4, 53),
      /^FAIL/,
      "DNS follows the container's own policy",
    );
    await h.host.stopContainer(narrow.id, { remove: true, graceMs: 0 });
  });

  await t.test("the fleet's hosts are replaced at runtime", async () => {
    await h.net.setFleet({ hosts: [a.public4], ports: [coordinatorPort] });
    assert.deepEqual(h.net.fleetDeny, { hosts: [`${a.public4}/32`], ports: [coordinatorPort] });
    assert.match(
      await probe(open.id, a.public4, coordinatorPort),
      /^FAIL/,
      "the new fleet host's coordinator port",
    );
    assert.equal(
      await probe(open.id, a.fleetPublic4, coordinatorPort),
      "OK coordinator",
      "no longer a fleet host",
    );
    await assert.rejects(
      h.net.setFleet({ hosts: ["nope"], ports: [1] }),
      (e: Error & { code?: string }) => e.code === "invalid_request" && /nope/.test(e.message),
    );
    assert.deepEqual(h.net.fleetDeny.hosts, [`${a.public4}/32`], "a refused update changes nothing");
  });

  for (const c of [open, listed]) await h.host.stopContainer(c.id, { remove: true, graceMs: 0 });
});
