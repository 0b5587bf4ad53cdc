import type { HardLimits } from "./rlimits.ts";
import { clampedRlimits } from "./rlimits.ts";
import { buildSeccompProfile } from "./seccomp.ts";
import type { ResolvedContainerSpec } from "./spec.ts";
import { resolveContainerSpec } from "./spec.ts";
import type { OciDeviceCgroup, OciMount, OciNamespace, OciSpec } from "./oci-types.ts";
import type { ContainerSpec } from "./types.ts";

/** What the OCI config depends on besides the container spec. */
export interface HostFacts {
  cgroupVersion: 1 | 2;
  /** Hard rlimits of the agent process (runc inherits them). */
  hardLimits: HardLimits;
  /** Whether the memory cgroup accounts swap (v1 memory.memsw.*); v2 is assumed to. */
  swapAccounting: boolean;
  /** Node's process.arch ("x64", "arm64"). */
  arch: string;
  /** Parent of every container cgroup. @default "/berth" */
  cgroupParent?: string;
}

// Docker's default set minus NET_RAW (raw sockets: ARP/ICMP spoofing inside
// a shared network) and MKNOD (devices come only from the spec).
export const CONTAINER_CAPABILITIES = [
  "CAP_CHOWN",
  "CAP_DAC_OVERRIDE",
  "CAP_FSETID",
  "CAP_FOWNER",
  "CAP_SETGID",
  "CAP_SETUID",
  "CAP_SETFCAP",
  "CAP_SETPCAP",
  "CAP_NET_BIND_SERVICE",
  "CAP_SYS_CHROOT",
  "CAP_KILL",
  "CAP_AUDIT_WRITE",
];

export const MASKED_PATHS = [
  "/proc/acpi",
  "/proc/asound",
  "/proc/kcore",
  "/proc/keys",
  "/proc/latency_stats",
  "/proc/timer_list",
  "/proc/timer_stats",
  "/proc/sched_debug",
  "/proc/scsi",
  "/sys/firmware",
  "/sys/devices/virtual/powercap",
];

export const READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

// runc creates these nodes itself; the cgroup must still allow them.
const STANDARD_DEVICE_RULES: OciDeviceCgroup[] = [
  { allow: true, type: "c", major: 1, minor: 3, access: "rwm" }, // null
  { allow: true, type: "c", major: 1, minor: 5, access: "rwm" }, // zero
  { allow: true, type: "c", major: 1, minor: 7, access: "rwm" }, // full
  { allow: true, type: "c", major: 1, minor: 8, access: "rwm" }, // random
  { allow: true, type: "c", major: 1, minor: 9, access: "rwm" }, // urandom
  { allow: true, type: "c", major: 5, minor: 0, access: "rwm" }, // tty
  { allow: true, type: "c", major: 5, minor: 2, access: "rwm" }, // ptmx
  { allow: true, type: "c", major: 136, access: "rwm" }, // pts/*
];

export const CPU_PERIOD_US = 100_000;

/** The CFS quota (per CPU_PERIOD_US) for a cap of `cpu` cores. */
export const cpuQuotaUs = (cpu: number): number => Math.max(1000, Math.round(cpu * CPU_PERIOD_US));

export function cgroupsPathFor(id: string, parent = "/berth"): string {
  return `${parent}/${id}`;
}

/** Builds the complete config.json object for one container. */
export function buildOciSpec(spec: ContainerSpec | ResolvedContainerSpec, host: HostFacts): OciSpec {
  const s = "lowerDirs" in spec ? spec : resolveContainerSpec(spec);
  const mounts: OciMount[] = [
    { destination: "/proc", type: "proc", source: "proc", options: ["nosuid", "noexec", "nodev"] },
    {
      destination: "/dev",
      type: "tmpfs",
      source: "tmpfs",
      options: ["nosuid", "strictatime", "mode=755", "size=65536k"],
    },
    {
      destination: "/dev/pts",
      type: "devpts",
      source: "devpts",
      options: ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
    },
    {
      destination: "/dev/shm",
      type: "tmpfs",
      source: "shm",
      options: ["nosuid", "noexec", "nodev", "mode=1777", `size=${s.shmBytes}`],
    },
    { destination: "/dev/mqueue", type: "mqueue", source: "mqueue", options: ["nosuid", "noexec", "nodev"] },
    { destination: "/sys", type: "sysfs", source: "sysfs", options: ["nosuid", "noexec", "nodev", "ro"] },
    {
      destination: "/sys/fs/cgroup",
      type: "cgroup",
      source: "cgroup",
      options: ["nosuid", "noexec", "nodev", "relatime", "ro"],
    },
    {
      destination: "/tmp",
      type: "tmpfs",
      source: "tmpfs",
      options: ["nosuid", "nodev", "mode=1777", `size=${s.tmpBytes}`],
    },
  ];
  for (const m of s.mounts) {
    mounts.push({
      destination: m.destination,
      type: "bind",
      source: m.source,
      options: ["rbind", m.readonly ? "ro" : "rw", "nosuid", "nodev", ...(m.options ?? [])],
    });
  }

  const namespaces: OciNamespace[] = [{ type: "pid" }, { type: "ipc" }, { type: "uts" }, { type: "mount" }];
  namespaces.push(s.netnsPath ? { type: "network", path: s.netnsPath } : { type: "network" });
  if (host.cgroupVersion === 2) namespaces.push({ type: "cgroup" });

  const devices: OciDeviceCgroup[] = [{ allow: false, access: "rwm" }, ...STANDARD_DEVICE_RULES];
  for (const d of s.extraDevices) {
    devices.push({ allow: true, type: d.type, major: d.major, minor: d.minor, access: "rwm" });
  }
  for (const r of s.extraDeviceRules) {
    const rule: OciDeviceCgroup = { allow: r.allow, type: r.type, access: r.access ?? "rwm" };
    if (r.major !== undefined) rule.major = r.major;
    if (r.minor !== undefined) rule.minor = r.minor;
    devices.push(rule);
  }

  const memory: { limit: number; swap?: number } = { limit: s.memoryBytes };
  // OCI swap is memory+swap; equal to the limit means no swap at all.
  if (host.swapAccounting || host.cgroupVersion === 2) memory.swap = s.memoryBytes;

  return {
    ociVersion: "1.0.2",
    process: {
      terminal: false,
      user: { uid: s.user.uid, gid: s.user.gid, additionalGids: s.user.additionalGids },
      args: s.args,
      env: Object.entries(s.env).map(([k, v]) => `${k}=${v}`),
      cwd: s.cwd,
      capabilities: {
        bounding: CONTAINER_CAPABILITIES,
        effective: CONTAINER_CAPABILITIES,
        permitted: CONTAINER_CAPABILITIES,
        inheritable: [],
        ambient: [],
      },
      rlimits: clampedRlimits(host.hardLimits),
      noNewPrivileges: true,
    },
    root: { path: "rootfs", readonly: false },
    hostname: s.hostname,
    mounts,
    linux: {
      namespaces,
      devices: s.extraDevices.map((d) => ({
        path: d.path,
        type: d.type,
        major: d.major,
        minor: d.minor,
        fileMode: d.fileMode ?? 0o666,
        uid: d.uid ?? 0,
        gid: d.gid ?? 0,
      })),
      cgroupsPath: cgroupsPathFor(s.id, host.cgroupParent),
      resources: {
        devices,
        memory,
        cpu: {
          quota: cpuQuotaUs(s.startupCpu ?? s.cpu),
          period: CPU_PERIOD_US,
          shares: Math.max(2, Math.round(s.cpu * 1024)),
        },
        pids: { limit: s.pidsLimit },
      },
      seccomp: buildSeccompProfile(host.arch),
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
    },
    annotations: Object.fromEntries(Object.entries(s.labels).map(([k, v]) => [`berth.label.${k}`, v])),
  };
}
