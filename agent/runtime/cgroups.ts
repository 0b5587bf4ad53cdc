import { existsSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

// Reads what runc's cgroupfs driver made for a container. v1 has one
// hierarchy per controller (mount points found in mountinfo, so combined
// mounts like "cpu,cpuacct" work); v2 has one unified tree.

export interface CgroupLayout {
  version: 1 | 2;
  /** v2: the unified mount. v1: unused (see controllers). */
  unifiedMount: string;
  /** v1: controller → mount point (also "name=systemd" and "unified" in hybrid mode). */
  controllers: Map<string, string>;
  /** Whether the memory controller accounts swap. */
  swapAccounting: boolean;
}

export function detectCgroups(mountinfo = "/proc/self/mountinfo"): CgroupLayout {
  const controllers = new Map<string, string>();
  let unified = "";
  let v2Root = "";
  for (const line of readFileSync(mountinfo, "utf8").split("\n")) {
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const left = line.slice(0, sep).split(" ");
    const right = line.slice(sep + 3).split(" ");
    const mountPoint = left[4];
    const fsType = right[0];
    if (!mountPoint) continue;
    if (fsType === "cgroup2") {
      if (mountPoint === "/sys/fs/cgroup") v2Root = mountPoint;
      else unified ||= mountPoint;
    } else if (fsType === "cgroup") {
      for (const opt of (right[2] ?? "").split(",")) {
        if (["rw", "ro", "relatime", "nosuid", "nodev", "noexec", "clone_children"].includes(opt)) continue;
        if (!controllers.has(opt)) controllers.set(opt, mountPoint);
      }
    }
  }
  if (v2Root || (controllers.size === 0 && unified)) {
    const mount = v2Root || unified;
    return { version: 2, unifiedMount: mount, controllers: new Map(), swapAccounting: true };
  }
  if (controllers.size === 0) throw new Error("no cgroup filesystem is mounted");
  if (unified) controllers.set("unified", unified);
  const memory = controllers.get("memory");
  return {
    version: 1,
    unifiedMount: unified,
    controllers,
    swapAccounting: memory ? existsSync(join(memory, "memory.memsw.limit_in_bytes")) : false,
  };
}

function v1Dir(cg: CgroupLayout, controller: string, cgroupsPath: string): string {
  const mount = cg.controllers.get(controller);
  if (!mount) throw new Error(`cgroup v1 controller ${controller} is not mounted`);
  return join(mount, cgroupsPath);
}

function readOrUndefined(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** "key value" lines (memory.events, memory.oom_control, cpu.stat) → map. */
export function parseFlatKeyed(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const [k, v] = line.trim().split(/\s+/);
    if (k && v !== undefined) out.set(k, Number(v));
  }
  return out;
}

export interface OomState {
  /** Processes the kernel OOM-killed in this cgroup; undefined where the kernel does not count them. */
  oomKills?: number;
  /** v1 only: times the memory limit was hit (a hint on kernels without oom_kill). */
  limitHits?: number;
}

export function readOomState(cg: CgroupLayout, cgroupsPath: string): OomState {
  if (cg.version === 2) {
    const events = readOrUndefined(join(cg.unifiedMount, cgroupsPath, "memory.events"));
    return { oomKills: events === undefined ? undefined : (parseFlatKeyed(events).get("oom_kill") ?? 0) };
  }
  const dir = v1Dir(cg, "memory", cgroupsPath);
  const control = readOrUndefined(join(dir, "memory.oom_control"));
  const failcnt = readOrUndefined(join(dir, "memory.failcnt"));
  return {
    oomKills: control === undefined ? undefined : parseFlatKeyed(control).get("oom_kill"),
    limitHits: failcnt === undefined ? undefined : Number(failcnt.trim()),
  };
}

export interface CpuLimit {
  /** null when unlimited */
  quotaUs: number | null;
  periodUs: number;
}

export function readCpuLimit(cg: CgroupLayout, cgroupsPath: string): CpuLimit {
  if (cg.version === 2) {
    const [quota, period] = readFileSync(join(cg.unifiedMount, cgroupsPath, "cpu.max"), "utf8")
      .trim()
      .split(" ");
    return { quotaUs: quota === "max" ? null : Number(quota), periodUs: Number(period) };
  }
  const dir = v1Dir(cg, "cpu", cgroupsPath);
  const quota = Number(readFileSync(join(dir, "cpu.cfs_quota_us"), "utf8").trim());
  const period = Number(readFileSync(join(dir, "cpu.cfs_period_us"), "utf8").trim());
  return { quotaUs: quota < 0 ? null : quota, periodUs: period };
}

/** Sets the CFS quota of a container's cgroup (the period stays). */
export function writeCpuQuota(cg: CgroupLayout, cgroupsPath: string, quotaUs: number): void {
  if (cg.version === 2) {
    const file = join(cg.unifiedMount, cgroupsPath, "cpu.max");
    const period = readFileSync(file, "utf8").trim().split(" ")[1];
    writeFileSync(file, `${quotaUs} ${period}`);
    return;
  }
  writeFileSync(join(v1Dir(cg, "cpu", cgroupsPath), "cpu.cfs_quota_us"), String(quotaUs));
}

export function readPidsLimit(cg: CgroupLayout, cgroupsPath: string): number | null {
  const dir = cg.version === 2 ? join(cg.unifiedMount, cgroupsPath) : v1Dir(cg, "pids", cgroupsPath);
  const v = readFileSync(join(dir, "pids.max"), "utf8").trim();
  return v === "max" ? null : Number(v);
}

/**
 * Forks and clones the pids controller refused because the cgroup was at
 * pids.max: the `max` counter of pids.events (same file and format in v1 and
 * v2). Undefined where the kernel has no such file.
 */
export function readPidsRefused(cg: CgroupLayout, cgroupsPath: string): number | undefined {
  const dir = cg.version === 2 ? join(cg.unifiedMount, cgroupsPath) : v1Dir(cg, "pids", cgroupsPath);
  const events = readOrUndefined(join(dir, "pids.events"));
  return events === undefined ? undefined : (parseFlatKeyed(events).get("max") ?? 0);
}

export interface CgroupUsage {
  cpuUsageNs: number;
  memoryBytes: number;
  /** Peak memory where the kernel reports it. */
  memoryPeakBytes?: number;
}

export function readUsage(cg: CgroupLayout, cgroupsPath: string): CgroupUsage {
  if (cg.version === 2) {
    const dir = join(cg.unifiedMount, cgroupsPath);
    const stat = parseFlatKeyed(readFileSync(join(dir, "cpu.stat"), "utf8"));
    const peak = readOrUndefined(join(dir, "memory.peak"));
    return {
      cpuUsageNs: (stat.get("usage_usec") ?? 0) * 1000,
      memoryBytes: Number(readFileSync(join(dir, "memory.current"), "utf8").trim()),
      memoryPeakBytes: peak === undefined ? undefined : Number(peak.trim()),
    };
  }
  const mem = v1Dir(cg, "memory", cgroupsPath);
  const acct = v1Dir(cg, cg.controllers.has("cpuacct") ? "cpuacct" : "cpu", cgroupsPath);
  return {
    cpuUsageNs: Number(readFileSync(join(acct, "cpuacct.usage"), "utf8").trim()),
    memoryBytes: Number(readFileSync(join(mem, "memory.usage_in_bytes"), "utf8").trim()),
    memoryPeakBytes: Number(readFileSync(join(mem, "memory.max_usage_in_bytes"), "utf8").trim()),
  };
}

/** Every directory a container's cgroup may occupy, deepest-first per hierarchy. */
export function cgroupDirs(cg: CgroupLayout, cgroupsPath: string): string[] {
  const mounts = cg.version === 2 ? [cg.unifiedMount] : [...new Set(cg.controllers.values())];
  return mounts.map((m) => join(m, cgroupsPath));
}

/**
 * Removes the container's cgroup directories that runc left (it leaves them
 * after `run --keep`, and on crashes). Directories still holding processes
 * stay (rmdir fails with EBUSY) and are returned.
 */
export function removeCgroupDirs(cg: CgroupLayout, cgroupsPath: string): string[] {
  const busy: string[] = [];
  for (const dir of cgroupDirs(cg, cgroupsPath)) {
    try {
      rmdirSync(dir);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "ENOENT") busy.push(dir);
    }
  }
  return busy;
}
