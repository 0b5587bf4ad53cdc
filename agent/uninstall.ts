// `berth agent uninstall` (cli/commands/agent-uninstall.ts): takes off a host everything the agent and `berth
// agent join` put there (docs/operations.md): the unit and agent.env, the
// containers, the mounts below the data directory, the bridge, veths,
// namespaces and nft tables, the forwarding sysctls (back to what they were
// before berth), the cgroup parent, and the data directory. The agent makes
// no user; the kernel modules its unit loads stay loaded.

import { execFile } from "node:child_process";
import { existsSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { basename, dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { BerthError, describeError } from "../shared/errors.ts";
import { cleanupNetworkByPrefix, listNftTables, readSysctlRecord } from "./network/index.ts";

const run = promisify(execFile);

export interface UninstallOptions {
  dataDir: string;
  /** The agent's network names (resolveAgentOptions(...).network). */
  network: { bridge: string; table: string; namePrefix: string };
  /** berth-agent.service as `berth agent join` installed it. */
  unitPath: string;
  envFile: string;
  /** Keep the data directory (images, volumes) after the rest is removed. */
  keepData: boolean;
  /** The cgroup every container's cgroup sits under (agent/runtime: cgroupParent). */
  cgroupParent?: string;
  systemdRunDir?: string;
  log: (line: string) => void;
}

/** Whether an agent answers on its unix socket: uninstalling under a running agent would race it. */
function agentAnswers(socket: string): Promise<boolean> {
  if (!existsSync(socket)) return Promise.resolve(false);
  return new Promise((done) => {
    const c = connect(socket);
    c.once("connect", () => {
      c.destroy();
      done(true);
    });
    c.once("error", () => done(false));
  });
}

/** Mount points at or below `root`, deepest first (mountinfo escapes blanks as \040). */
export function mountsBelow(root: string, mountinfo = "/proc/self/mountinfo"): string[] {
  const r = resolve(root);
  const points = readFileSync(mountinfo, "utf8")
    .split("\n")
    .map((l) => l.split(" ")[4])
    .filter((p): p is string => p !== undefined)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8))))
    .filter((p) => p === r || p.startsWith(`${r}/`));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

async function tryRun(cmd: string, args: string[]): Promise<{ ok: boolean; out: string }> {
  try {
    const { stdout } = await run(cmd, args, { timeout: 60_000 });
    return { ok: true, out: stdout };
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    return { ok: false, out: (err.stderr || err.message).trim() };
  }
}

export async function uninstallAgent(o: UninstallOptions): Promise<{ problems: string[] }> {
  const problems: string[] = [];
  const step = async (what: string, fn: () => Promise<void> | void) => {
    try {
      await fn();
    } catch (e) {
      problems.push(`${what}: ${describeError(e)}`);
      o.log(`could not ${what}: ${describeError(e)}`);
    }
  };
  const dataDir = resolve(o.dataDir);
  const unitPath = o.unitPath;
  const unitName = basename(unitPath);
  const systemd = existsSync(o.systemdRunDir ?? "/run/systemd/system");

  // 1. The unit stops the agent; without systemd the agent must already be stopped.
  if (systemd && existsSync(unitPath)) {
    const r = await tryRun("systemctl", ["disable", "--now", unitName]);
    if (!r.ok) throw new BerthError("internal", `systemctl disable --now ${unitName} failed: ${r.out}`);
    o.log(`stopped and disabled ${unitName}`);
  }
  if (await agentAnswers(join(dataDir, "agent.sock"))) {
    throw new BerthError(
      "failed_precondition",
      `an agent still answers on ${join(dataDir, "agent.sock")}: stop it first (systemctl stop berth-agent, or end berth up)`,
    );
  }

  // 2. Containers, under each runtime's state root (agent/runtime: <data dir>/containers/.<runtime>).
  for (const rt of ["runc", "crun", "runsc"]) {
    const root = join(dataDir, "containers", `.${rt}`);
    if (!existsSync(root)) continue;
    await step(`remove ${rt} containers`, async () => {
      const list = await tryRun(rt, ["--root", root, "list", "-q"]);
      if (!list.ok) throw new Error(`${rt} list: ${list.out}`);
      for (const id of list.out.split("\n").filter(Boolean)) {
        const d = await tryRun(rt, ["--root", root, "delete", "--force", id]);
        if (!d.ok) throw new Error(`${rt} delete --force ${id}: ${d.out}`);
        o.log(`removed container ${id} (${rt})`);
      }
    });
  }

  // 3. Mounts below the data directory: container root filesystems, disks, volumes, buckets.
  if (existsSync(dataDir)) {
    for (const m of mountsBelow(dataDir)) {
      await step(`unmount ${m}`, async () => {
        const u = await tryRun("umount", [m]);
        if (!u.ok) {
          const lazy = await tryRun("umount", ["-l", m]);
          if (!lazy.ok) throw new Error(lazy.out);
        }
        o.log(`unmounted ${m}`);
      });
    }
  }

  // 4. Networking: namespaces, veths, the bridge and the two nft tables of this agent's names.
  await step("remove the network", async () => {
    await cleanupNetworkByPrefix(o.network);
    o.log(
      `removed bridge ${o.network.bridge}, nft tables inet/bridge ${o.network.table}, namespaces and veths ${o.network.namePrefix}*`,
    );
  });

  // 5. Forwarding, back to its value before berth, unless another berth agent's tables remain.
  await step("restore the forwarding sysctls", async () => {
    const record = readSysctlRecord(join(dataDir, "network"));
    if (!record) {
      o.log("no record of the forwarding sysctls before berth: left as they are");
      return;
    }
    const others = (await listNftTables()).filter((t) => t.name === "berth" || t.name.startsWith("berth_"));
    if (others.length > 0) {
      o.log(
        `forwarding left on: another berth agent's tables remain (${others.map((t) => `${t.family} ${t.name}`).join(", ")})`,
      );
      return;
    }
    for (const [key, value] of Object.entries(record)) {
      writeFileSync(join("/proc/sys", key), value);
      o.log(`sysctl ${key.replaceAll("/", ".")} = ${value} (as before berth)`);
    }
  });

  // 6. The containers' cgroup parent, when no container of any agent is left in it.
  await step("remove the cgroup parent", () => {
    for (const dir of cgroupParentDirs(o.cgroupParent ?? "/berth")) {
      if (!existsSync(dir)) continue;
      if (readdirSync(dir, { withFileTypes: true }).some((e) => e.isDirectory())) {
        o.log(`${dir} still holds containers' cgroups (another agent's): left`);
        continue;
      }
      rmdirSync(dir);
      o.log(`removed cgroup ${dir}`);
    }
  });

  // 7. The data directory, then the unit and agent.env.
  if (!o.keepData && existsSync(dataDir)) {
    await step(`remove ${dataDir}`, () => {
      if (mountsBelow(dataDir).length > 0)
        throw new Error("mounts remain below it (see above): left in place");
      rmSync(dataDir, { recursive: true, force: true });
      o.log(`removed ${dataDir}`);
    });
  } else if (o.keepData) o.log(`kept ${dataDir} (--keep-data)`);
  for (const f of [unitPath, o.envFile]) {
    if (!existsSync(f)) continue;
    await step(`remove ${f}`, () => {
      rmSync(f);
      o.log(`removed ${f}`);
    });
  }
  const etc = dirname(o.envFile);
  if (existsSync(etc) && readdirSync(etc).length === 0) rmdirSync(etc);
  if (systemd) await step("reload systemd", async () => void (await tryRun("systemctl", ["daemon-reload"])));
  return { problems };
}

/** `<mount>/<parent>` in the unified hierarchy and in each v1 hierarchy. */
function cgroupParentDirs(parent: string, mountinfo = "/proc/self/mountinfo"): string[] {
  const dirs: string[] = [];
  for (const line of readFileSync(mountinfo, "utf8").split("\n")) {
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const fsType = line.slice(sep + 3).split(" ")[0];
    if (fsType === "cgroup" || fsType === "cgroup2")
      dirs.push(join(line.slice(0, sep).split(" ")[4]!, parent));
  }
  return dirs;
}
