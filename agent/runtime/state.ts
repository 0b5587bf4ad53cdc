import { readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { OomState } from "./cgroups.ts";
import type { IdMap } from "./idmap.ts";
import type { ResolvedContainerSpec } from "./spec.ts";
import type { ContainerInfo, ExitReason } from "./types.ts";

// What a container leaves in its bundle dir, so a restarted agent can adopt
// it: the spec and bookkeeping (meta.json), runc's pid file, the waiter's
// exit file, and the two log spools.

export interface ContainerPaths {
  dir: string;
  config: string;
  meta: string;
  stdout: string;
  stderr: string;
  pidFile: string;
  exitFile: string;
  runcLog: string;
}

export function containerPaths(root: string, id: string): ContainerPaths {
  const dir = join(root, id);
  return {
    dir,
    config: join(dir, "config.json"),
    meta: join(dir, "meta.json"),
    stdout: join(dir, "stdout.log"),
    stderr: join(dir, "stderr.log"),
    pidFile: join(dir, "init.pid"),
    exitFile: join(dir, "exit-status"),
    runcLog: join(dir, "runc.log"),
  };
}

/** Why berth signalled the container, which decides the exit reason. */
export type StopIntent = "term" | "kill" | "timeout";

export interface ContainerMeta {
  version: 1;
  spec: ResolvedContainerSpec;
  /**
   * The name runc, the bundle dir and the cgroup know the container by, when
   * it is not spec.id: a pre-warmed container keeps the name it started
   * under after ContainerRuntime.assign() gave it its stub's id.
   */
  ociId?: string;
  cgroupsPath: string;
  /** Its user namespace's id range (absent: root inside is the host's root). */
  idMap?: IdMap;
  /** Where its root is mounted, when not at <bundle>/rootfs (a user namespace's: idmap.ts sharedRootfsDir). */
  rootfs?: string;
  createdAt: number;
  startedAt?: number;
  pid: number;
  /** The sh that runs `runc run` and records the exit status. */
  waiterPid?: number;
  timeoutAt?: number;
  stopIntent?: StopIntent;
  logOffsets: { stdout: number; stderr: number };
  exit?: { code: number; reason: ExitReason; at: number };
}

/** Where a container's root is mounted on the host. */
export const rootfsOf = (meta: Pick<ContainerMeta, "rootfs">, bundleDir: string): string =>
  meta.rootfs ?? join(bundleDir, "rootfs");

export function writeMeta(path: string, meta: ContainerMeta): void {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, JSON.stringify(meta));
  renameSync(tmp, path);
}

export function readMeta(path: string): ContainerMeta | undefined {
  try {
    const m = JSON.parse(readFileSync(path, "utf8")) as ContainerMeta;
    return m.version === 1 && m.spec ? m : undefined;
  } catch {
    return undefined;
  }
}

/** The status the waiter wrote, with the time it wrote it; undefined until then. */
export function readExitFile(path: string): { code: number; at: number } | undefined {
  try {
    const text = readFileSync(path, "utf8").trim();
    if (!/^\d+$/.test(text)) return undefined; // not written yet (sh truncates, then writes)
    return { code: Number(text), at: Math.round(statSync(path).mtimeMs) };
  } catch {
    return undefined;
  }
}

export function readPidFile(path: string): number | undefined {
  try {
    const pid = Number(readFileSync(path, "utf8").trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** True while `pid` exists and is not a zombie. */
export function processAlive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

const SIGKILL_STATUS = 128 + 9;
const SIGTERM_STATUS = 128 + 15;

/**
 * The exit code alone cannot tell exit(137) from death by SIGKILL (runc
 * reports 128+signo), so the reason also uses what berth itself did and what
 * the memory cgroup counted.
 */
export function exitReason(o: { code: number; intent?: StopIntent; oom: OomState }): ExitReason {
  if (o.code < 0) return "unknown";
  if (o.code !== 0) {
    if ((o.oom.oomKills ?? 0) > 0) return "oom_killed";
    // Kernels without v1's oom_kill counter: a limit hit plus an unexplained SIGKILL.
    if (
      o.oom.oomKills === undefined &&
      (o.oom.limitHits ?? 0) > 0 &&
      o.code === SIGKILL_STATUS &&
      !o.intent
    ) {
      return "oom_killed";
    }
  }
  if (o.intent === "timeout") return "timed_out";
  if (o.code === SIGKILL_STATUS) return "killed";
  if (o.intent && o.code === SIGTERM_STATUS) return "killed";
  return "exited";
}

export function containerInfo(m: ContainerMeta, status: ContainerInfo["status"]): ContainerInfo {
  const out: ContainerInfo = {
    id: m.spec.id,
    pid: m.pid,
    status,
    createdAt: m.createdAt,
    labels: { ...m.spec.labels },
    runtime: m.spec.runtime ?? "runc",
  };
  if (m.startedAt !== undefined) out.startedAt = m.startedAt;
  if (m.exit) {
    out.exitCode = m.exit.code;
    out.reason = m.exit.reason;
    out.exitedAt = m.exit.at;
  }
  return out;
}
