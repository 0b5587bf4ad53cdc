// `berth agent uninstall` on a host set up as a joined agent leaves it: the
// host (a network namespace of its own, temp directories) compared before
// and after: nft tables, links, namespaces, mounts, unit files, forwarding
// sysctls and the data directory.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { promisify } from "node:util";
import { mountsBelow } from "../../agent/uninstall.ts";
import { needs, tempDir } from "../helpers/env.ts";

const run = promisify(execFile);
const HOST_SCRIPT = fileURLToPath(new URL("./uninstall-host.ts", import.meta.url));

test("berth agent uninstall leaves no bridge, nft table, namespace, mount, unit, sysctl or data directory", async (t) => {
  if (!needs(t, { root: true, commands: ["unshare", "nft", "ip", "mount"] })) return;
  const dir = tempDir(t, "berth-uninstall-");
  const prefix = `u${randomBytes(2).toString("hex")}`;
  // Whatever a failed run leaves: its mounts end with its mount namespace; the namespaces' files are the host's.
  t.after(async () => {
    for (const m of mountsBelow(dir)) await run("umount", ["-l", m]).catch(() => {});
    const leftover = existsSync("/run/netns")
      ? readdirSync("/run/netns").filter((n) => n.startsWith(`${prefix}-`))
      : [];
    for (const n of leftover) await run("ip", ["netns", "del", n]).catch(() => {});
  });

  const { stdout } = await run(
    "unshare",
    [
      "-n",
      "-m",
      "--propagation",
      "private",
      "--",
      process.execPath,
      "--import",
      "tsx",
      HOST_SCRIPT,
      dir,
      prefix,
    ],
    { timeout: 300_000 },
  );
  const r = JSON.parse(stdout.trim().split("\n").pop()!) as {
    before: Record<string, unknown> & { nftTables: string[]; links: string[]; forwarding: string[] };
    installed: Record<string, unknown> & {
      nftTables: string[];
      links: string[];
      netns: string[];
      mounts: string[];
      units: string[];
      forwarding: string[];
    };
    after: Record<string, unknown>;
    code: number;
    out: string;
  };
  // Installed: the agent's tables, bridge, a pooled namespace, two mounts, the unit and agent.env, forwarding on.
  assert.deepEqual(
    r.installed.nftTables,
    [...r.before.nftTables, `bridge berth_${prefix}`, `inet berth_${prefix}`].sort(),
  );
  assert.ok(r.installed.links.includes(`${prefix}br0`), JSON.stringify(r.installed.links));
  assert.equal(r.installed.netns.length, 1);
  assert.equal(r.installed.mounts.length, 2);
  assert.equal(r.installed.units.length, 2);
  assert.deepEqual(r.before.forwarding, ["0", "0"]);
  assert.deepEqual(r.installed.forwarding, ["1", "1"]);

  assert.equal(r.code, 0, r.out);
  assert.match(r.out, new RegExp(`removed bridge ${prefix}br0, nft tables inet/bridge berth_${prefix}`));
  assert.match(r.out, /the agent is uninstalled/);
  assert.deepEqual(r.after, r.before, r.out);
});
