/**
 * A pre-warmed container given to a stub (ContainerRuntime.assign): the
 * spec it is known by from then on, and the cgroup limits `runc update`
 * gives it.
 */
import { readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { CPU_PERIOD_US, cpuQuotaUs, type HostFacts } from "./oci-spec.ts";
import type { CgroupUpdate } from "./runc.ts";
import type { ResolvedContainerSpec } from "./spec.ts";

/** What a pre-warmed container becomes when it is given to a stub. */
export interface Assignment {
  cpu: number;
  /** A CPU cap for the stub's start-up, as ContainerSpec.startupCpu. */
  startupCpu?: number;
  memoryBytes: number;
  /** @default the pre-warmed container's own */
  pidsLimit?: number;
  labels: Record<string, string>;
  timeoutMs?: number;
  /**
   * The environment and working directory a `runc exec` into it starts
   * from (a tty shell): written into its bundle's config.json, which runc
   * exec reads. Its own processes got theirs over its socket.
   */
  exec?: { env: Record<string, string>; cwd: string };
}

/** The warm container's spec with the stub's id, limits, labels and timeout (a boost only above `cpu`). */
export function assignedSpec(
  warm: ResolvedContainerSpec,
  toId: string,
  a: Assignment,
): ResolvedContainerSpec {
  const startupCpu = a.startupCpu !== undefined && a.startupCpu > a.cpu ? a.startupCpu : undefined;
  const { startupCpu: _old, timeoutMs: _oldTimeout, ...rest } = warm;
  return {
    ...rest,
    id: toId,
    cpu: a.cpu,
    ...(startupCpu === undefined ? {} : { startupCpu }),
    memoryBytes: a.memoryBytes,
    pidsLimit: a.pidsLimit ?? warm.pidsLimit,
    labels: { ...a.labels },
    ...(a.timeoutMs === undefined ? {} : { timeoutMs: a.timeoutMs }),
    ...(a.exec ? { env: { ...a.exec.env }, cwd: a.exec.cwd } : {}),
  };
}

/**
 * Makes `runc exec` into the assigned container start from the stub's
 * environment and working directory: runc exec takes its process from the
 * bundle's config.json, which still holds the warm container's. The file is
 * replaced whole (a rename), with its mode: as for any container, its
 * environment (secrets included) is in its bundle, readable by root only.
 */
export function writeExecProcess(
  configPath: string,
  exec: { env: Record<string, string>; cwd: string },
): void {
  const config = JSON.parse(readFileSync(configPath, "utf8")) as {
    process: { env?: string[]; cwd?: string };
  };
  config.process.env = Object.entries(exec.env).map(([k, v]) => `${k}=${v}`);
  config.process.cwd = exec.cwd;
  const tmp = `${configPath}.assign`;
  writeFileSync(tmp, JSON.stringify(config), { mode: statSync(configPath).mode & 0o777 });
  renameSync(tmp, configPath);
}

/** The cgroup limits of an assigned spec; swap is capped where the host accounts it. */
export function assignmentUpdate(spec: ResolvedContainerSpec, host: HostFacts): CgroupUpdate {
  const swap = host.swapAccounting || host.cgroupVersion === 2;
  return {
    cpuQuotaUs: cpuQuotaUs(spec.startupCpu ?? spec.cpu),
    cpuPeriodUs: CPU_PERIOD_US,
    cpuShares: Math.max(2, Math.round(spec.cpu * 1024)),
    memoryBytes: spec.memoryBytes,
    ...(swap ? { memorySwapBytes: spec.memoryBytes } : {}),
    pidsLimit: spec.pidsLimit,
  };
}
