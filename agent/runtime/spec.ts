import { statSync } from "node:fs";
import { isIP } from "node:net";
import { isAbsolute } from "node:path";
import { invalid } from "../../shared/errors.ts";
import { isOciRuntimeName, OCI_RUNTIMES, type OciRuntimeName } from "./oci-runtimes.ts";
import { OCI_HOOK_PHASES, type OciHookPhase, type OciHooks } from "./oci-types.ts";
import { SECCOMP_FILTERS, type SeccompFilter } from "./seccomp.ts";
import type { BindMount, ContainerSpec, DeviceNode, DeviceRule, NetnsAddresses } from "./types.ts";

// ContainerSpec → ResolvedContainerSpec: every default filled in and every
// value checked once, so the OCI builder and the runtime never re-check.

export const MIN_MEMORY_BYTES = 6 * 1024 * 1024;
export const MIN_CPU = 0.01;
export const DEFAULT_PIDS_LIMIT = 4096;
export const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const ENV_KEY_RE = /^[^=\0]+$/;
const HOSTNAME_RE = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
// overlayfs separates lowerdirs with ':' and options with ','.
const UNSAFE_OVERLAY_PATH = /[:,\n]/;

export interface ResolvedContainerSpec {
  id: string;
  lowerDirs: string[];
  args: string[];
  env: Record<string, string>;
  cwd: string;
  user: { uid: number; gid: number; additionalGids: number[] };
  hostname: string;
  cpu: number;
  /** The CPU cap until the start-up ends; at least `cpu`. */
  startupCpu?: number;
  memoryBytes: number;
  pidsLimit: number;
  shmBytes: number;
  tmpBytes: number;
  mounts: BindMount[];
  netnsPath?: string;
  netnsAddresses?: NetnsAddresses;
  extraDevices: DeviceNode[];
  extraDeviceRules: DeviceRule[];
  hooks?: OciHooks;
  labels: Record<string, string>;
  timeoutMs?: number;
  startupWindowMs: number;
  /** Absent in metadata written before runtimes could be chosen: runc. */
  runtime?: OciRuntimeName;
  /** Where ContainerRuntime.mountCode() mounts a code tree later (absent: it cannot). */
  codeSlot?: string;
  /** Asked for a user namespace (the runtime picks its id range: ContainerMeta.idMap). */
  userNamespace?: boolean;
  /** Absent (and in metadata written before it could be chosen): "allowlist". */
  seccomp?: SeccompFilter;
}

function positiveInt(v: unknown, name: string, min = 1): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min) {
    throw invalid(`${name} must be an integer >= ${min}, got ${JSON.stringify(v)}`, { field: name });
  }
  return v;
}

function absolutePath(v: unknown, name: string): string {
  if (typeof v !== "string" || !isAbsolute(v) || v.includes("\0")) {
    throw invalid(`${name} must be an absolute path, got ${JSON.stringify(v)}`, { field: name });
  }
  return v;
}

/** Checks values and fills defaults; touches no files. Throws BerthError invalid_request. */
export function resolveContainerSpec(spec: ContainerSpec): ResolvedContainerSpec {
  if (typeof spec.id !== "string" || !ID_RE.test(spec.id)) {
    throw invalid(
      `container id ${JSON.stringify(spec.id)} is invalid: use 1-128 letters, digits, '_', '.', '-', starting with a letter or digit`,
      { field: "id" },
    );
  }
  const roots = spec.image?.rootfs;
  const lowerDirs = Array.isArray(roots) ? roots : [roots];
  if (lowerDirs.length === 0) throw invalid("image.rootfs is empty", { field: "image.rootfs" });
  for (const dir of lowerDirs) {
    absolutePath(dir, "image.rootfs");
    if (UNSAFE_OVERLAY_PATH.test(dir)) {
      throw invalid(`image.rootfs ${dir} contains ':' or ',' which overlayfs cannot take`, {
        field: "image.rootfs",
      });
    }
  }
  if (!Array.isArray(spec.args) || spec.args.length === 0) {
    throw invalid("args must be a non-empty list (args[0] is the program to run)", { field: "args" });
  }
  if (spec.args.some((a) => typeof a !== "string" || a.includes("\0")) || spec.args[0] === "") {
    throw invalid("args must be strings without NUL bytes, and args[0] must not be empty", { field: "args" });
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(spec.env ?? {})) {
    if (!ENV_KEY_RE.test(k) || typeof v !== "string" || v.includes("\0")) {
      throw invalid(
        `env ${JSON.stringify(k)} is invalid: names may not contain '=' or NUL, values must be strings`,
        {
          field: "env",
        },
      );
    }
    env[k] = v;
  }
  env.PATH ??= DEFAULT_PATH;
  checkCpuAndMemory(spec.cpu, spec.memoryBytes);
  const user = spec.user ?? { uid: 0, gid: 0 };
  positiveInt(user.uid, "user.uid", 0);
  positiveInt(user.gid, "user.gid", 0);
  for (const g of user.additionalGids ?? []) positiveInt(g, "user.additionalGids", 0);
  const hostname = spec.hostname ?? spec.id.slice(0, 63).replace(/[^A-Za-z0-9-]/g, "-");
  if (!HOSTNAME_RE.test(hostname))
    throw invalid(`hostname ${JSON.stringify(hostname)} is invalid`, { field: "hostname" });
  const mounts = (spec.mounts ?? []).map((m, i) => {
    absolutePath(m.source, `mounts[${i}].source`);
    absolutePath(m.destination, `mounts[${i}].destination`);
    return { ...m };
  });
  for (const [i, d] of (spec.extraDevices ?? []).entries()) {
    absolutePath(d.path, `extraDevices[${i}].path`);
    if (d.type !== "c" && d.type !== "b") throw invalid(`extraDevices[${i}].type must be "c" or "b"`);
    positiveInt(d.major, `extraDevices[${i}].major`, 0);
    positiveInt(d.minor, `extraDevices[${i}].minor`, 0);
  }
  for (const [i, r] of (spec.extraDeviceRules ?? []).entries()) {
    if (!["a", "b", "c"].includes(r.type))
      throw invalid(`extraDeviceRules[${i}].type must be "a", "b" or "c"`);
    if (r.access !== undefined && !/^[rwm]{1,3}$/.test(r.access)) {
      throw invalid(`extraDeviceRules[${i}].access must be made of r, w, m`);
    }
  }
  if (spec.runtime !== undefined && !isOciRuntimeName(spec.runtime)) {
    throw invalid(`runtime must be one of ${OCI_RUNTIMES.join(", ")}, got ${JSON.stringify(spec.runtime)}`, {
      field: "runtime",
    });
  }
  if (spec.seccomp !== undefined && !SECCOMP_FILTERS.includes(spec.seccomp)) {
    throw invalid(
      `seccomp must be one of ${SECCOMP_FILTERS.join(", ")}, got ${JSON.stringify(spec.seccomp)}`,
      { field: "seccomp" },
    );
  }
  const memoryBytes = spec.memoryBytes;
  return {
    ...(spec.runtime === undefined ? {} : { runtime: spec.runtime }),
    id: spec.id,
    lowerDirs,
    args: [...spec.args],
    env,
    cwd: spec.cwd === undefined ? "/" : absolutePath(spec.cwd, "cwd"),
    user: { uid: user.uid, gid: user.gid, additionalGids: user.additionalGids ?? [] },
    hostname,
    cpu: spec.cpu,
    ...(spec.startupCpu === undefined ? {} : { startupCpu: startupCpuOf(spec.startupCpu, spec.cpu) }),
    memoryBytes,
    pidsLimit: spec.pidsLimit === undefined ? DEFAULT_PIDS_LIMIT : positiveInt(spec.pidsLimit, "pidsLimit"),
    // As /tmp: sized to the memory limit, its pages count against it (model servers and PyTorch
    // put shared tensors here; a fixed 64 MiB broke them while the limit had room).
    shmBytes: spec.shmBytes === undefined ? memoryBytes : positiveInt(spec.shmBytes, "shmBytes", 4096),
    tmpBytes: spec.tmpBytes === undefined ? memoryBytes : positiveInt(spec.tmpBytes, "tmpBytes", 4096),
    mounts,
    netnsPath: spec.netnsPath === undefined ? undefined : absolutePath(spec.netnsPath, "netnsPath"),
    ...(spec.netnsAddresses === undefined
      ? {}
      : { netnsAddresses: checkNetnsAddresses(spec.netnsAddresses) }),
    extraDevices: [...(spec.extraDevices ?? [])],
    extraDeviceRules: [...(spec.extraDeviceRules ?? [])],
    ...(spec.hooks === undefined ? {} : { hooks: checkHooks(spec.hooks) }),
    labels: { ...(spec.labels ?? {}) },
    timeoutMs: spec.timeoutMs === undefined ? undefined : positiveInt(spec.timeoutMs, "timeoutMs"),
    startupWindowMs:
      spec.startupWindowMs === undefined ? 0 : positiveInt(spec.startupWindowMs, "startupWindowMs", 0),
    ...(spec.codeSlot === undefined ? {} : { codeSlot: absolutePath(spec.codeSlot, "codeSlot") }),
    ...(spec.userNamespace === true ? { userNamespace: true } : {}),
    ...(spec.seccomp === undefined ? {} : { seccomp: spec.seccomp }),
  };
}

/** Throws invalid_request unless `id` can name a container (what resolveContainerSpec checks of spec.id). */
export function checkContainerId(id: unknown): string {
  if (typeof id !== "string" || !ID_RE.test(id)) {
    throw invalid(
      `container id ${JSON.stringify(id)} is invalid: use 1-128 letters, digits, '_', '.', '-', starting with a letter or digit`,
      { field: "id" },
    );
  }
  return id;
}

/** A code tree the runtime mounts as an overlay lower dir: absolute, and free of overlayfs' separators. */
export function checkOverlayLowerDir(dir: unknown, field: string): string {
  const d = absolutePath(dir, field);
  if (UNSAFE_OVERLAY_PATH.test(d))
    throw invalid(`${field} ${d} contains ':' or ',' which overlayfs cannot take`, { field });
  return d;
}

/** The host paths a spec names must exist; called once before anything is written. */
export function checkSpecPaths(spec: ResolvedContainerSpec): void {
  const must = (path: string, field: string, dir?: boolean) => {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(path);
    } catch {
      throw invalid(`${field} ${path} does not exist on the host`, { field });
    }
    if (dir && !st.isDirectory()) throw invalid(`${field} ${path} is not a directory`, { field });
  };
  for (const d of spec.lowerDirs) must(d, "image.rootfs", true);
  for (const [i, m] of spec.mounts.entries()) must(m.source, `mounts[${i}].source`);
  if (spec.netnsPath) must(spec.netnsPath, "netnsPath");
}

/** The cpu and memory a container may ask for; shared with the agent host's request checks. */
export function checkCpuAndMemory(cpu: unknown, memoryBytes: unknown): void {
  if (typeof cpu !== "number" || !Number.isFinite(cpu) || cpu < MIN_CPU) {
    throw invalid(`cpu must be a number of cores >= ${MIN_CPU}, got ${JSON.stringify(cpu)}`, {
      field: "cpu",
    });
  }
  if (typeof memoryBytes !== "number" || !Number.isSafeInteger(memoryBytes)) {
    throw invalid(`memoryBytes must be an integer, got ${JSON.stringify(memoryBytes)}`, {
      field: "memoryBytes",
    });
  }
  if (memoryBytes < MIN_MEMORY_BYTES) {
    throw invalid(
      `memoryBytes ${memoryBytes} is too small: runc needs at least ${MIN_MEMORY_BYTES} (6 MiB)`,
      {
        field: "memoryBytes",
      },
    );
  }
}

function startupCpuOf(v: unknown, cpu: number): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw invalid("startupCpu must be a positive number of cores", { field: "startupCpu" });
  }
  return Math.max(v, cpu);
}

// They reach `ip -batch` lines in a hook: only well-formed addresses, nothing else.
function checkNetnsAddresses(a: NetnsAddresses): NetnsAddresses {
  const address = (v: unknown, family: 4 | 6, field: string, cidr: boolean): string => {
    const [ip, prefix, ...rest] = typeof v === "string" ? v.split("/") : [];
    const max = family === 4 ? 32 : 128;
    const ok =
      ip !== undefined &&
      isIP(ip) === family &&
      rest.length === 0 &&
      (cidr ? /^\d{1,3}$/.test(prefix ?? "") && Number(prefix) <= max : prefix === undefined);
    if (!ok) {
      const want = `an IPv${family} address${cidr ? " with its prefix length" : ""}`;
      throw invalid(`netnsAddresses.${field} must be ${want}, got ${JSON.stringify(v)}`, {
        field: `netnsAddresses.${field}`,
      });
    }
    return v as string;
  };
  return {
    ...(a.ipv4 === undefined ? {} : { ipv4: address(a.ipv4, 4, "ipv4", true) }),
    ...(a.ipv6 === undefined ? {} : { ipv6: address(a.ipv6, 6, "ipv6", true) }),
    ...(a.gateway4 === undefined ? {} : { gateway4: address(a.gateway4, 4, "gateway4", false) }),
    ...(a.gateway6 === undefined ? {} : { gateway6: address(a.gateway6, 6, "gateway6", false) }),
    ...(a.gang4 === undefined ? {} : { gang4: address(a.gang4, 4, "gang4", true) }),
  };
}

/** Hooks by phase, copied; a phase OCI does not know or a relative path is refused. */
function checkHooks(hooks: OciHooks): OciHooks {
  const out: OciHooks = {};
  for (const [phase, list] of Object.entries(hooks)) {
    if (!OCI_HOOK_PHASES.includes(phase as OciHookPhase))
      throw invalid(`hooks.${phase} is not an OCI hook phase`, { field: "hooks" });
    out[phase as OciHookPhase] = (list ?? []).map((h, i) => {
      absolutePath(h.path, `hooks.${phase}[${i}].path`);
      return { ...h, ...(h.args ? { args: [...h.args] } : {}), ...(h.env ? { env: [...h.env] } : {}) };
    });
  }
  return out;
}
