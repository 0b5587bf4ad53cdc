// Run by agent-uninstall.test.ts inside its own network and mount namespaces (unshare -n -m):
// sets a host up as a joined agent leaves it (the agent's Network with its
// bridge, nft tables, pooled namespace and forwarding; mounts below the data
// directory; the unit and agent.env of `berth agent join`), runs the real
// `berth agent uninstall`, and prints the host's state before, installed and
// after as one JSON line.
// argv: <temp dir> <network prefix>

import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { Network } from "../../agent/network/index.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import { installAgentUnit } from "../../cli/join/unit.ts";
import { mountsBelow } from "../../agent/uninstall.ts";

const run = promisify(execFile);
const [dir, prefix] = process.argv.slice(2) as [string, string];
const agentDir = join(dir, "agent");
const unitDir = join(dir, "units");
const envFile = join(dir, "etc", "agent.env");
const names = resolveAgentOptions({ networkPrefix: prefix }).network;

async function snapshot() {
  const tables = JSON.parse((await run("nft", ["-j", "list", "tables"])).stdout) as {
    nftables: { table?: { family: string; name: string } }[];
  };
  const links = JSON.parse((await run("ip", ["-j", "link"])).stdout) as { ifname: string }[];
  return {
    nftTables: tables.nftables.flatMap((e) => (e.table ? [`${e.table.family} ${e.table.name}`] : [])).sort(),
    links: links.map((l) => l.ifname).sort(),
    netns: (existsSync("/run/netns") ? readdirSync("/run/netns") : []).filter((n) =>
      n.startsWith(`${prefix}-`),
    ),
    mounts: mountsBelow(dir),
    units: [join(unitDir, "berth-agent.service"), envFile].filter((f) => existsSync(f)),
    dataDir: existsSync(agentDir),
    forwarding: ["net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"].map((k) =>
      readFileSync(`/proc/sys/${k}`, "utf8").trim(),
    ),
  };
}

// A sysfs of this network namespace (its own mount namespace keeps the host's /sys as it is).
await run("mount", ["-t", "sysfs", "sysfs", "/sys"]);
await run("ip", ["link", "set", "lo", "up"]);
// Forwarding off before berth (a new namespace may inherit it on): uninstall must turn it off again.
for (const k of ["net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"]) writeFileSync(`/proc/sys/${k}`, "0");
const before = await snapshot();

await Network.start({ dataDir: join(agentDir, "network"), ...names, poolSize: 1 });
const rootfs = join(agentDir, "containers", "c1", "rootfs");
mkdirSync(rootfs, { recursive: true });
await run("mount", ["-t", "tmpfs", "tmpfs", rootfs]);
mkdirSync(join(rootfs, "data"));
await run("mount", ["-t", "tmpfs", "tmpfs", join(rootfs, "data")]);
await installAgentUnit(
  {
    coordinator: "http://127.0.0.1:8420",
    joinToken: "jt-test",
    agentArgs: ["--data-dir", agentDir, "--network-prefix", prefix],
  },
  { unitDir, envFile, start: false, log: () => {} },
);
const installed = await snapshot();

// The real CLI; it finds the data directory and the network prefix in agent.env.
const cli = new URL("../../cli/bin.js", import.meta.url).pathname;
const args = [cli, "agent", "uninstall", "--unit-dir", unitDir, "--agent-env", envFile];
let code = 0;
let out = "";
try {
  const r = await run(process.execPath, args, { timeout: 120_000 });
  out = r.stdout + r.stderr;
} catch (e) {
  const err = e as { code?: number; stdout?: string; stderr?: string };
  code = err.code ?? -1;
  out = `${err.stdout ?? ""}${err.stderr ?? ""}`;
}
const after = await snapshot();
process.stdout.write(`${JSON.stringify({ before, installed, after, code, out })}\n`);
process.exit(0);
