// Host B of the two-host tests: a network namespace whose eth0 is a veth to
// A (its own host as far as addresses go), and `berth agent` run inside it.

import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { CLI_BIN } from "./berth-up.ts";
import { assertNothingLeft, type Teardown, type TestNames } from "../network/helpers.ts";

const exec = promisify(execFile);

/** Host B: a namespace whose eth0 is a veth to A (10.214.X.1 on A's side, .2 on B's). */
export async function hostB(
  td: Teardown,
  b: TestNames,
): Promise<{ ns: string; addrA: string; addrB: string }> {
  const ns = `${b.namePrefix}-b`;
  const veth = `${b.namePrefix}a0`;
  const addrA = `10.214.${b.octet}.1`;
  const addrB = `10.214.${b.octet}.2`;
  const ip = (...args: string[]) => exec("ip", args);
  td.defer(async () => {
    // The agent's container namespaces (named by its prefix) and B itself; B's links and nft go with it.
    const { stdout } = await exec("ip", ["netns", "list"]);
    for (const line of stdout.split("\n")) {
      const name = line.split(" ")[0] ?? "";
      if (name.startsWith(b.namePrefix) && name !== ns) await ip("netns", "del", name).catch(() => {});
    }
    await ip("netns", "del", ns).catch(() => {});
    await ip("link", "del", veth).catch(() => {});
    await assertNothingLeft(b);
  });
  await ip("netns", "add", ns);
  await ip("-n", ns, "link", "set", "lo", "up");
  await ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns);
  await ip("addr", "add", `${addrA}/24`, "dev", veth);
  await ip("link", "set", veth, "up");
  await ip("-n", ns, "addr", "add", `${addrB}/24`, "dev", "eth0");
  await ip("-n", ns, "link", "set", "eth0", "up");
  await ip("-n", ns, "route", "add", "default", "via", addrA);
  return { ns, addrA, addrB };
}

export interface AgentB {
  output(): string;
  exited: Promise<number | null>;
  child: ChildProcess;
}

/**
 * `berth agent` in B's network namespace (its own process group, killed at teardown). Like `ip
 * netns exec`, in a mount namespace of its own with a sysfs of B's network (the agent reads
 * /sys/class/net), but with the host's cgroup tree bound back under it (ip netns exec leaves none).
 */
export function startAgentB(td: Teardown, ns: string, hold: string, args: string[]): AgentB {
  const inB =
    'mount --rbind /sys/fs/cgroup "$0" && mount -t sysfs sysfs /sys && mount --rbind "$0" /sys/fs/cgroup && umount -l "$0" && exec "$@"';
  const child = spawn(
    "nsenter",
    [
      `--net=/run/netns/${ns}`,
      ...["unshare", "--mount", "--propagation", "slave", "sh", "-c", inB, hold],
      ...[process.execPath, CLI_BIN, "agent", ...args],
    ],
    { stdio: ["ignore", "pipe", "pipe"], detached: true },
  );
  let out = "";
  for (const s of [child.stdout, child.stderr])
    if (s) createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  const pid = child.pid as number;
  td.defer(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    try {
      process.kill(-pid, "SIGTERM");
    } catch {}
    const t = setTimeout(() => {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {}
    }, 30_000);
    await exited;
    clearTimeout(t);
  });
  return { output: () => out, exited, child };
}

/** The flags of the join command `berth up --advertise` printed for other hosts (coordinator, token, CA). */
export function joinFlags(upOutput: string): string[] {
  const printed =
    /berth agent join (--coordinator https:\/\/\S+ --join-token \S+ --ca-fingerprint sha256:[0-9a-f]{64})/.exec(
      upOutput,
    );
  assert.ok(printed?.[1], `berth up printed no join command:\n${upOutput}`);
  return printed[1].split(" ");
}
