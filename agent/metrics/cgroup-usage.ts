import { readFileSync } from "node:fs";
import { parseFlatKeyed } from "../runtime/cgroups.ts";
import { join } from "node:path";
import type { CgroupLayout } from "../runtime/index.ts";

// What the metrics sampler reads of one container's cgroup. Memory is the
// working set (usage less inactive page cache), as cAdvisor and `docker
// stats` report it: raw usage counts cache the kernel drops under pressure,
// so it reads near the limit for any container that reads files.

export interface CgroupSample {
  /** Cumulative CPU time of the cgroup, in ns. */
  cpuUsageNs: number;
  /** Working set in bytes. */
  memoryBytes: number;
  /** Usage as the kernel counts it, page cache included. */
  memoryUsageBytes: number;
}


function readNumber(path: string): number {
  const text = readFileSync(path, "utf8").trim();
  const n = Number(text);
  if (text === "" || !Number.isFinite(n)) throw new Error(`${path} holds "${text}", not a number`);
  return n;
}

function v1Dir(cg: CgroupLayout, controller: string, cgroupsPath: string): string {
  const mount = cg.controllers.get(controller);
  if (!mount) throw new Error(`cgroup v1 controller ${controller} is not mounted`);
  return join(mount, cgroupsPath);
}

/**
 * Reads a container's CPU time and memory. v1: cpuacct.usage,
 * memory.usage_in_bytes less memory.stat total_inactive_file. v2: cpu.stat
 * usage_usec, memory.current less memory.stat inactive_file. Throws when the
 * cgroup is gone (the container exited between listing and reading).
 */
export function readCgroupSample(cg: CgroupLayout, cgroupsPath: string): CgroupSample {
  if (cg.version === 2) {
    const dir = join(cg.unifiedMount, cgroupsPath);
    const cpu = parseFlatKeyed(readFileSync(join(dir, "cpu.stat"), "utf8"));
    const usageUsec = cpu.get("usage_usec");
    if (usageUsec === undefined) throw new Error(`${join(dir, "cpu.stat")} has no usage_usec`);
    const usage = readNumber(join(dir, "memory.current"));
    const stat = parseFlatKeyed(readFileSync(join(dir, "memory.stat"), "utf8"));
    return { cpuUsageNs: usageUsec * 1000, ...workingSet(usage, stat.get("inactive_file")) };
  }
  const acct = v1Dir(cg, cg.controllers.has("cpuacct") ? "cpuacct" : "cpu", cgroupsPath);
  const mem = v1Dir(cg, "memory", cgroupsPath);
  const usage = readNumber(join(mem, "memory.usage_in_bytes"));
  const stat = parseFlatKeyed(readFileSync(join(mem, "memory.stat"), "utf8"));
  // total_ counts the hierarchy below too; a container's cgroup has no children, but runc may add some.
  const inactive = stat.get("total_inactive_file") ?? stat.get("inactive_file");
  return { cpuUsageNs: readNumber(join(acct, "cpuacct.usage")), ...workingSet(usage, inactive) };
}

function workingSet(usage: number, inactiveFile: number | undefined): Omit<CgroupSample, "cpuUsageNs"> {
  const inactive = inactiveFile ?? 0;
  return { memoryBytes: Math.max(0, usage - inactive), memoryUsageBytes: usage };
}

/** Cores used between two readings of one cgroup (never negative: a reset counter reads as 0). */
export function coresBetween(prevNs: number, prevAtMs: number, nowNs: number, nowAtMs: number): number {
  const elapsedMs = nowAtMs - prevAtMs;
  if (elapsedMs <= 0) return 0;
  return Math.max(0, nowNs - prevNs) / (elapsedMs * 1e6);
}
