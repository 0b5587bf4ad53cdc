import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { cpus, hostname, release, totalmem } from "node:os";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

export interface MachineInfo {
  hostname: string;
  cpuModel: string;
  cores: number;
  kernel: string;
  memoryBytes: number;
  /** 1-minute load average when the run started: other work on a shared machine shows here. */
  loadAvg1: number;
  cgroupVersion: 1 | 2;
}

export function machineInfo(): MachineInfo {
  const list = cpus();
  let loadAvg1 = Number.NaN;
  try {
    loadAvg1 = Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
  } catch {
    // Not Linux: leave it unknown.
  }
  let cgroupVersion: 1 | 2 = 1;
  try {
    if (/ \/sys\/fs\/cgroup cgroup2 /.test(readFileSync("/proc/self/mounts", "utf8"))) cgroupVersion = 2;
  } catch {
    // Unknown: report v1.
  }
  return {
    hostname: hostname(),
    cpuModel: list[0]?.model.trim() ?? "unknown",
    cores: list.length,
    kernel: release(),
    memoryBytes: totalmem(),
    loadAvg1,
    cgroupVersion,
  };
}

/** `<cmd> <args>`'s first output line, or "unavailable: <why>" when it cannot run. */
export async function toolVersion(cmd: string, args: string[] = ["--version"]): Promise<string> {
  try {
    const { stdout, stderr } = await execFileP(cmd, args, { timeout: 10_000 });
    return (stdout || stderr).trim().split("\n")[0] ?? "";
  } catch (e) {
    const err = e as NodeJS.ErrnoException & { stderr?: string };
    return `unavailable: ${err.code === "ENOENT" ? `${cmd} not installed` : (err.stderr || err.message).trim()}`;
  }
}
