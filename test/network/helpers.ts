// Real-traffic fixtures for the network tests: a Network instance with names
// of its own, an "outside world" namespace routed by the host, python3
// listeners and connection probes with bounded timeouts.

import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes, randomInt } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { cleanupNetworkByPrefix } from "../../agent/network/cleanup.ts";
import { Network, type NetworkOptions } from "../../agent/network/index.ts";
import { waitFor } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";

const exec = promisify(execFile);

type After = { after: (fn: () => unknown) => void };

/**
 * Teardown steps run last-in first-out in a single t.after (node:test runs
 * after hooks first-in first-out), each one even when an earlier one failed.
 */
export class Teardown {
  private readonly steps: (() => unknown)[] = [];

  constructor(t: After) {
    t.after(() => this.run());
  }

  defer(fn: () => unknown): void {
    this.steps.push(fn);
  }

  private async run(): Promise<void> {
    const errors: unknown[] = [];
    while (this.steps.length > 0) {
      try {
        await this.steps.pop()?.();
      } catch (e) {
        errors.push(e);
      }
    }
    if (errors.length > 0) throw errors[0];
  }
}

export const NETWORK_COMMANDS = ["ip", "nft", "python3"];

export interface TestNames {
  namePrefix: string;
  bridge: string;
  table: string;
  /** Third octet of 10.213.X.0/24 and group of fd42:X::/64 (containers), and 10.214.X.0/24 (outside). */
  octet: number;
  subnet4: string;
  subnet6: string;
}

async function usedOctets(): Promise<Set<number>> {
  const { stdout } = await exec("ip", ["-j", "addr", "show"]);
  const used = new Set<number>();
  for (const m of stdout.matchAll(/"10\.21[34]\.(\d+)\.\d+"/g)) used.add(Number(m[1]));
  return used;
}

const OCTET_CLAIMS = join(tmpdir(), "berth-test-octets");
const claimed: string[] = [];

/**
 * Claims an octet for this test process with a file made exclusively
 * (O_EXCL), so two test files starting at once never pick the same one
 * before either has made its bridge. A claim whose process has ended is
 * stale and taken over; this process's claims go when it exits.
 */
function claimOctet(octet: number): boolean {
  mkdirSync(OCTET_CLAIMS, { recursive: true });
  const file = join(OCTET_CLAIMS, String(octet));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: "wx" });
      if (claimed.length === 0) process.on("exit", releaseOctets);
      claimed.push(file);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      if (processAlive(Number(readFileSync(file, "utf8")))) return false;
      rmSync(file, { force: true });
    }
  }
  return false;
}

function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

function releaseOctets(): void {
  for (const file of claimed.splice(0)) rmSync(file, { force: true });
}

/** Names and subnets no other test file running at the same time uses. */
export async function testNames(): Promise<TestNames> {
  const used = await usedOctets();
  let octet: number;
  do octet = randomInt(1, 255);
  while (used.has(octet) || !claimOctet(octet));
  const namePrefix = `t${randomBytes(3).toString("hex").slice(0, 5)}`;
  return {
    namePrefix,
    bridge: `${namePrefix}br`,
    table: `berth_test_${namePrefix}`,
    octet,
    subnet4: `10.213.${octet}.0/24`,
    subnet6: `fd42:${octet.toString(16)}::/64`,
  };
}

/** Everything of these names is gone from the host. */
export async function assertNothingLeft(names: TestNames): Promise<void> {
  const [netns, links, tables] = await Promise.all([
    exec("ip", ["netns", "list"]),
    exec("ip", ["-o", "link", "show"]),
    exec("nft", ["list", "tables"]),
  ]);
  for (const [what, out] of [
    ["ip netns list", netns.stdout],
    ["ip link", links.stdout],
  ] as const) {
    assert.ok(!out.includes(names.namePrefix), `${what} still lists ${names.namePrefix}:\n${out}`);
  }
  assert.ok(!tables.stdout.includes(names.table), `nft still lists ${names.table}:\n${tables.stdout}`);
}

/**
 * Starts a Network with the test's names and a temp data dir. Teardown
 * (destroy, then a by-prefix sweep, then the leftovers assertion) runs in
 * t.after, also when the test fails.
 */
export async function startTestNetwork(
  t: After,
  down: Teardown,
  names: TestNames,
  extra: Partial<NetworkOptions> = {},
): Promise<{ net: Network; dataDir: string }> {
  const dataDir = extra.dataDir ?? tempDir(t, "berth-net-");
  const options = networkOptions(names, dataDir, extra);
  const net = await Network.start(options);
  down.defer(() => net.destroy());
  return { net, dataDir };
}

/** Defers the final sweep and leftovers assertion; call first so it runs last. */
export function sweepAfter(down: Teardown, names: TestNames): void {
  down.defer(async () => {
    await cleanupNetworkByPrefix(names);
    await assertNothingLeft(names);
  });
}

export interface Outside {
  netns: string;
  /** Listener addresses inside the outside namespace. */
  primary4: string;
  secondary4: string;
  primary6: string;
  secondary6: string;
  metadata4: string;
  metadata6: string;
}

/**
 * A namespace standing in for the internet: a veth from the host with its own
 * subnet (10.214.X.0/24, fd43:X::/64), routed by the host. It also holds
 * 169.254.169.254, reached only by packets from the test's container subnet
 * (a source-specific policy route, so the host's own metadata path is untouched).
 */
export async function createOutside(down: Teardown, names: TestNames): Promise<Outside> {
  const ns = `${names.namePrefix}-out`;
  const veth = `${names.namePrefix}o0`;
  const x = names.octet;
  const hx = x.toString(16);
  const table = String(20000 + x);
  const rulePriority = String(20000 + x);
  const ip = (...args: string[]) => exec("ip", args);
  down.defer(async () => {
    await exec("ip", ["rule", "del", "priority", rulePriority]).catch(() => {});
    await exec("ip", ["-6", "rule", "del", "priority", rulePriority]).catch(() => {});
    await exec("ip", ["route", "flush", "table", table]).catch(() => {});
    await exec("ip", ["-6", "route", "flush", "table", table]).catch(() => {});
    await exec("ip", ["link", "del", veth]).catch(() => {});
    await exec("ip", ["netns", "del", ns]).catch(() => {});
  });
  await ip("netns", "add", ns);
  await ip("-n", ns, "link", "set", "lo", "up");
  await ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns);
  await ip("addr", "add", `10.214.${x}.1/24`, "dev", veth);
  await ip("-6", "addr", "add", `fd43:${hx}::1/64`, "dev", veth, "nodad");
  await ip("link", "set", veth, "up");
  for (const a of [`10.214.${x}.2/24`, `10.214.${x}.3/32`, "169.254.169.254/32"]) {
    await ip("-n", ns, "addr", "add", a, "dev", "eth0");
  }
  for (const a of [`fd43:${hx}::2/64`, `fd43:${hx}::3/128`]) {
    await ip("-n", ns, "-6", "addr", "add", a, "dev", "eth0", "nodad");
  }
  await ip("-n", ns, "link", "set", "eth0", "up");
  await ip("-n", ns, "route", "add", "default", "via", `10.214.${x}.1`);
  await ip("-n", ns, "-6", "route", "add", "default", "via", `fd43:${hx}::1`);
  await ip("route", "add", `10.214.${x}.3/32`, "via", `10.214.${x}.2`);
  await ip("-6", "route", "add", `fd43:${hx}::3/128`, "via", `fd43:${hx}::2`);
  await ip("route", "add", "169.254.169.254/32", "via", `10.214.${x}.2`, "table", table);
  await ip(
    "rule",
    "add",
    "priority",
    rulePriority,
    "from",
    names.subnet4,
    "to",
    "169.254.169.254/32",
    "table",
    table,
  );
  await ip("-n", ns, "-6", "addr", "add", "fd00:ec2::254/128", "dev", "eth0", "nodad");
  await ip("-6", "route", "add", "fd00:ec2::254/128", "via", `fd43:${hx}::2`, "table", table);
  await ip(
    "-6",
    "rule",
    "add",
    "priority",
    rulePriority,
    "from",
    names.subnet6,
    "to",
    "fd00:ec2::254/128",
    "table",
    table,
  );
  return {
    netns: ns,
    primary4: `10.214.${x}.2`,
    secondary4: `10.214.${x}.3`,
    primary6: `fd43:${hx}::2`,
    secondary6: `fd43:${hx}::3`,
    metadata4: "169.254.169.254",
    metadata6: "fd00:ec2::254",
  };
}

const LISTENER = `
import socket, sys, threading
port, token = int(sys.argv[1]), sys.argv[2]
socks = []
for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, port))
    s.listen(16)
    socks.append(s)
def serve(s):
    while True:
        c, _ = s.accept()
        try:
            c.sendall((token + "\\n").encode())
        finally:
            c.close()
for s in socks:
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
`;

/** A TCP probe: "OK <token>" or "FAIL <why>"; run in a namespace or a container. */
export const PROBE = `
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    s.settimeout(2)
    print("OK " + s.recv(100).decode().strip())
except Exception as e:
    print("FAIL " + type(e).__name__ + " " + str(e))
`;

/** Spawns a process in a namespace, killed (by its pid) in t.after. */
export function spawnIn(down: Teardown, netns: string, argv: string[]): ChildProcess {
  const child = spawn("ip", ["netns", "exec", netns, ...argv], { stdio: ["ignore", "pipe", "pipe"] });
  down.defer(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  return child;
}

/** A TCP listener on every address of the namespace that answers `token`. */
export async function listenIn(
  down: Teardown,
  netns: string,
  port: number,
  token: string,
): Promise<ChildProcess> {
  const child = spawnIn(down, netns, ["python3", "-c", LISTENER, String(port), token]);
  let out = "";
  let err = "";
  child.stdout?.on("data", (d) => {
    out += d;
  });
  child.stderr?.on("data", (d) => {
    err += d;
  });
  await waitFor(() => out.includes("ready") || child.exitCode !== null, {
    timeoutMs: 10_000,
    what: `listener in ${netns}`,
  });
  assert.ok(out.includes("ready"), `listener in ${netns} did not start: ${err}`);
  return child;
}

/** Tries a TCP connection from inside a namespace: "OK <token>" or "FAIL <why>". */
export async function probeFrom(netns: string, host: string, port: number): Promise<string> {
  const { stdout } = await exec("ip", ["netns", "exec", netns, "python3", "-c", PROBE, host, String(port)], {
    timeout: 15_000,
  });
  return stdout.trim();
}

export const randomPort = () => randomInt(20_000, 60_000);

/**
 * The private subnets of the test's outside namespace (createOutside), which
 * stands in for the internet: the test's operator allows them, as an
 * operator would a private mirror (private ranges are closed by default).
 */
export const outsideSubnets = (names: TestNames) => [
  `10.214.${names.octet}.0/24`,
  `fd43:${names.octet.toString(16)}::/64`,
];

/** Network options for a test's own names and subnets. */
export function networkOptions(
  names: TestNames,
  dataDir: string,
  extra: Partial<NetworkOptions> = {},
): NetworkOptions {
  return {
    dataDir,
    bridge: names.bridge,
    table: names.table,
    namePrefix: names.namePrefix,
    subnet4: names.subnet4,
    subnet6: names.subnet6,
    allowedPrivateCidrs: outsideSubnets(names),
    ...extra,
  };
}
