// `berth doctor`'s checks of the host itself: container runtimes, cgroups,
// nftables, kernel modules, the GPU driver and the data directories' disks.
// Each reads the real system; nothing here changes it.

import { execFile } from "node:child_process";
import { accessSync, constants, existsSync, readdirSync, readFileSync, statfsSync } from "node:fs";
import { release } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { describeError } from "../../shared/errors.ts";
import { type Finding, fail, ok, warn } from "./finding.ts";

const run = promisify(execFile);
const GiB = 2 ** 30;

/** `cmd` as the shell would find it on `path` (PATH), or undefined. */
export function findOnPath(cmd: string, path = process.env.PATH ?? ""): string | undefined {
  for (const dir of path.split(delimiter)) {
    if (dir === "") continue;
    const file = join(dir, cmd);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {}
  }
  return undefined;
}

async function firstLine(file: string, args: string[]): Promise<{ line?: string; error?: string }> {
  try {
    const { stdout } = await run(file, args, { timeout: 15_000 });
    return { line: stdout.trim().split("\n")[0] ?? "" };
  } catch (e) {
    const err = e as { stderr?: string };
    return { error: (err.stderr?.trim() || describeError(e)).split("\n")[0] };
  }
}

/** runc is required; crun and runsc are checked when present, or when the agent is set to use one. */
export async function checkRuntimes(path: string, agentRuntime: string | undefined): Promise<Finding[]> {
  const out: Finding[] = [];
  for (const name of ["runc", "crun", "runsc"]) {
    const required = name === "runc" || name === agentRuntime;
    const file = findOnPath(name, path);
    if (!file) {
      if (required) {
        const why = name === "runc" ? "containers run under runc" : `the agent runs with --runtime ${name}`;
        out.push(fail(name, `not found on PATH (${why})`, `install it: apt-get install ${name}`));
      }
      continue;
    }
    const v = await firstLine(file, ["--version"]);
    out.push(
      v.error !== undefined
        ? fail(
            name,
            `${file} --version failed: ${v.error}`,
            `reinstall it: apt-get install --reinstall ${name}`,
          )
        : ok(name, `${file}: ${v.line}`),
    );
  }
  return out;
}

/** The cgroup layout from mountinfo: v2 (unified), v1, or hybrid (v1 controllers plus a cgroup2 mount). */
export function checkCgroups(mountinfo = "/proc/self/mountinfo"): Finding {
  let text: string;
  try {
    text = readFileSync(mountinfo, "utf8");
  } catch (e) {
    return fail("cgroups", `cannot read ${mountinfo}: ${describeError(e)}`, "mount /proc");
  }
  let v2Mount: string | undefined;
  const v1: string[] = [];
  for (const line of text.split("\n")) {
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const mountPoint = line.slice(0, sep).split(" ")[4];
    const [fsType, , opts = ""] = line.slice(sep + 3).split(" ");
    if (fsType === "cgroup2") v2Mount ??= mountPoint;
    if (fsType === "cgroup") v1.push(...opts.split(",").filter((o) => ["cpu", "memory", "pids"].includes(o)));
  }
  const mountFix = "boot with systemd's default cgroup v2 (systemd.unified_cgroup_hierarchy=1)";
  if (v1.length > 0) {
    const missing = ["cpu", "memory", "pids"].filter((c) => !v1.includes(c));
    const kind = v2Mount ? "hybrid (v1 controllers, cgroup2 at " + v2Mount + ")" : "v1";
    if (missing.length > 0)
      return fail("cgroups", `${kind}: controllers ${missing.join(", ")} not mounted`, mountFix);
    return ok("cgroups", `${kind}: cpu, memory and pids mounted (crun needs v2; runc works on both)`);
  }
  if (!v2Mount) return fail("cgroups", "no cgroup filesystem is mounted", mountFix);
  let controllers: string[] = [];
  try {
    controllers = readFileSync(join(v2Mount, "cgroup.controllers"), "utf8").trim().split(/\s+/);
  } catch (e) {
    return fail(
      "cgroups",
      `v2 at ${v2Mount}, but cgroup.controllers is unreadable: ${describeError(e)}`,
      mountFix,
    );
  }
  const missing = ["cpu", "memory", "pids"].filter((c) => !controllers.includes(c));
  if (missing.length > 0) {
    return fail(
      "cgroups",
      `v2 at ${v2Mount}: controllers ${missing.join(", ")} not available (inside a container whose cgroup does not delegate them?)`,
      "run the agent on the host, or give its cgroup the controllers (systemd Delegate=yes, as berth-agent.service does)",
    );
  }
  return ok("cgroups", `v2 (unified) at ${v2Mount}: ${controllers.join(" ")}`);
}

/** nft must be installed, and as root must list the ruleset (the kernel has nf_tables). */
export async function checkNftables(path: string): Promise<Finding> {
  const file = findOnPath("nft", path);
  if (!file)
    return fail(
      "nftables",
      "nft not found on PATH (the agent's container network is nftables rules)",
      "install it: apt-get install nftables",
    );
  if (process.getuid?.() !== 0) {
    const v = await firstLine(file, ["--version"]);
    return warn(
      "nftables",
      `${file}: ${v.line ?? v.error}; the ruleset is readable only as root`,
      "run berth doctor as root to check it",
    );
  }
  const list = await firstLine(file, ["list", "tables"]);
  if (list.error !== undefined)
    return fail(
      "nftables",
      `nft list tables failed: ${list.error}`,
      "modprobe nf_tables (a kernel with nftables support)",
    );
  const v = await firstLine(file, ["--version"]);
  return ok("nftables", `${file}: ${v.line ?? "present"}, ruleset readable`);
}

/** The modules berth-agent.service loads before the agent starts (its ExecStartPre), with a symbol prefix each has. */
export const AGENT_MODULES: Readonly<Record<string, string>> = {
  overlay: "ovl_",
  veth: "veth_",
  bridge: "br_",
  nf_tables: "nft_",
};

/** Whether /proc/kallsyms holds a symbol with this prefix: the code is in the kernel (built in or loaded). */
function kernelHasSymbols(kallsyms: string, prefix: string): boolean {
  return kallsyms.includes(` ${prefix}`);
}

/** Loaded, built in, or at least installed (then the unit loads it). */
export function checkModules(
  modules: Readonly<Record<string, string>> = AGENT_MODULES,
  roots: { sys: string; lib: string; kallsyms: string } = {
    sys: "/sys/module",
    lib: join("/lib/modules", release()),
    kallsyms: "/proc/kallsyms",
  },
): Finding[] {
  const read = (file: string) => {
    try {
      return readFileSync(file, "utf8");
    } catch {
      return "";
    }
  };
  const builtin = read(join(roots.lib, "modules.builtin"));
  const dep = read(join(roots.lib, "modules.dep"));
  let kallsyms: string | undefined;
  return Object.entries(modules).map(([m, symbolPrefix]) => {
    const check = `module ${m}`;
    if (existsSync(join(roots.sys, m))) return ok(check, "loaded");
    const file = new RegExp(`/${m.replaceAll("_", "[_-]")}\\.ko(\\.[a-z]+)?:?(\\s|$)`, "m");
    kallsyms ??= read(roots.kallsyms);
    if (file.test(builtin) || kernelHasSymbols(kallsyms, symbolPrefix))
      return ok(check, "built into the kernel");
    if (file.test(dep))
      return warn(
        check,
        "installed but not loaded",
        `modprobe ${m} (berth-agent.service loads it at each start)`,
      );
    return fail(
      check,
      `not in the kernel and not found under ${roots.lib}`,
      `install the kernel's modules (apt-get install linux-modules-extra-$(uname -r) on Ubuntu), then modprobe ${m}`,
    );
  });
}

/** The NVIDIA driver: nvidia-smi and /dev/nvidia* together, or neither (a CPU-only host). */
export async function checkGpu(
  path: string,
  nvidiaSmi: string | undefined,
  devDir = "/dev",
): Promise<Finding> {
  let devices: string[] = [];
  try {
    devices = readdirSync(devDir).filter((d) => /^nvidia\d+$/.test(d));
  } catch {}
  const smi = nvidiaSmi
    ? existsSync(nvidiaSmi)
      ? nvidiaSmi
      : findOnPath(nvidiaSmi, path)
    : findOnPath("nvidia-smi", path);
  if (!smi && devices.length === 0)
    return ok("gpu", "no NVIDIA driver or devices: this host offers CPU only");
  if (!smi) {
    return fail(
      "gpu",
      `${devices.length} /dev/nvidia* device(s) but no nvidia-smi on PATH (the agent finds GPUs with it)`,
      "install the driver's utilities (apt-get install nvidia-utils-<version>), or give the agent --nvidia-smi PATH",
    );
  }
  const q = await firstLine(smi, ["--query-gpu=name,driver_version", "--format=csv,noheader"]);
  if (q.error !== undefined)
    return fail(
      "gpu",
      `${smi} fails: ${q.error}`,
      "load the driver (modprobe nvidia; nvidia-modprobe -u -c=0) or reinstall it",
    );
  if (devices.length === 0)
    return fail(
      "gpu",
      `${smi} answers (${q.line}) but there is no /dev/nvidia0`,
      "create the device nodes: nvidia-modprobe -u -c=0",
    );
  if (!existsSync(join(devDir, "nvidiactl")) || !existsSync(join(devDir, "nvidia-uvm")))
    return fail(
      "gpu",
      `${devices.length} GPU(s) (${q.line}) but /dev/nvidiactl or /dev/nvidia-uvm is missing`,
      "nvidia-modprobe -u -c=0 (or modprobe nvidia-uvm)",
    );
  return ok("gpu", `${devices.length} GPU(s): ${q.line}`);
}

/** Free space where each data directory lives (or will be made): under 1 GiB fails, under 10 GiB or 10% warns. */
export function checkDisk(dirs: readonly string[]): Finding[] {
  return [...new Set(dirs.map((d) => resolve(d)))].map((dir) => {
    let at = dir;
    while (!existsSync(at) && dirname(at) !== at) at = dirname(at);
    const check = `disk ${dir}`;
    try {
      const s = statfsSync(at);
      const free = s.bavail * s.bsize;
      const total = s.blocks * s.bsize;
      const detail = `${(free / GiB).toFixed(1)} GiB free of ${(total / GiB).toFixed(1)} GiB${at === dir ? "" : ` (on ${at}; not made yet)`}`;
      const fix = `free space on the filesystem of ${at}, or move the data directory (--data-dir) to a larger one`;
      if (free < GiB) return fail(check, detail, fix);
      if (free < 10 * GiB || free < total / 10)
        return warn(check, `${detail}: images and code archives need room`, fix);
      return ok(check, detail);
    } catch (e) {
      return fail(check, `cannot stat ${at}: ${describeError(e)}`, `check that ${at} is mounted`);
    }
  });
}
