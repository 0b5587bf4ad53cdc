import type { HostScratch, IdMap } from "./idmap.ts";
import type { HardLimits } from "./rlimits.ts";
import { clampedRlimits } from "./rlimits.ts";
import { buildSeccompProfile } from "./seccomp.ts";
import type { ResolvedContainerSpec } from "./spec.ts";
import { resolveContainerSpec } from "./spec.ts";
import { basename } from "node:path";
import { GANG_IFACE } from "../../shared/gang.ts";
import type { OciDeviceCgroup, OciHook, OciHooks, OciMount, OciNamespace, OciSpec } from "./oci-types.ts";
import type { ContainerSpec, NetnsAddresses } from "./types.ts";

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
/**
 * The OCI config of a container. With `idMap` it runs in a user namespace:
 * root inside is the map's host id.
 */
export function buildOciSpec(
  spec: ContainerSpec | ResolvedContainerSpec,
  host: HostFacts,
  idMap?: IdMap,
  scratch?: HostScratch,
): OciSpec {
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
    scratch
      ? {
          destination: "/dev/shm",
          type: "bind",
          source: scratch.shm,
          options: ["rbind", "rw", "nosuid", "noexec", "nodev"],
        }
      : {
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
    scratch
      ? {
          destination: "/tmp",
          type: "bind",
          source: scratch.tmp,
          options: ["rbind", "rw", "nosuid", "nodev"],
        }
      : {
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
  // A user-namespaced container cannot join the agent's namespace (runc exec would fail to
  // enter it, and it could not mount its sysfs): it gets a new one, owned by its user
  // namespace, and a hook moves the agent's configured eth0 in and takes over the name.
  const adopt = idMap !== undefined && s.netnsPath !== undefined;
  namespaces.push(s.netnsPath && !adopt ? { type: "network", path: s.netnsPath } : { type: "network" });
  if (host.cgroupVersion === 2) namespaces.push({ type: "cgroup" });
  const mapping = idMap ? [{ containerID: 0, hostID: idMap.hostId, size: idMap.size }] : undefined;
  if (mapping) namespaces.push({ type: "user" });

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
      ...(mapping ? { uidMappings: mapping, gidMappings: mapping } : {}),
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
      seccomp: buildSeccompProfile(host.arch, s.seccomp ?? "allowlist"),
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
    },
    ...hooksOf(s.hooks, adopt ? adoptNetnsHook(s.netnsPath as string, s.netnsAddresses) : undefined),
    annotations: Object.fromEntries(Object.entries(s.labels).map(([k, v]) => [`berth.label.${k}`, v])),
  };
}

/** The spec's hooks, with `first` ahead of its createRuntime ones. */
function hooksOf(hooks: OciHooks | undefined, first: OciHook | undefined): { hooks?: OciHooks } {
  const out: OciHooks = { ...(hooks ?? {}) };
  if (first) out.createRuntime = [first, ...(out.createRuntime ?? [])];
  return Object.keys(out).length > 0 ? { hooks: out } : {};
}

// Run by runc in the host's namespaces once the container's exist (createRuntime, the
// container's state on stdin): eth0 of the agent's namespace moves into the container's,
// whose addresses and default routes it had are applied again there (a move drops them),
// and the name (/run/netns/NAME) now points at the container's namespace, so everything the
// agent does by that name (ports, neighbours, removal) reaches it. The addresses come as
// arguments when the agent knows them; otherwise they are read before the move. A gang
// member's GANG_IFACE (agent/network/gang.ts) moves in with eth0, its address given after
// the gateways (its MAC and MTU survive the move; addresses do not). Three ip
// runs in all on the first path: the start of every user-namespaced container waits on it.
// `ip netns delete/attach` run without -n: `ip -n` enters a mount namespace of its own.
const ADOPT_NETNS = String.raw`set -e
ns="$1"
state=
read -r state || [ -n "$state" ]
pid=${"$"}{state#*\"pid\":}
pid=${"$"}{pid%%[!0-9]*}
[ -n "$pid" ] || { echo "no pid in the container state" >&2; exit 1; }
if [ "$#" -ge 5 ]; then
  a4="$2" a6="$3" g4="$4" g6="$5" gang="${"$"}{6:-}"
else
  a4=$(ip -n "$ns" -4 -o addr show dev eth0 scope global | awk '{print $4}')
  a6=$(ip -n "$ns" -6 -o addr show dev eth0 scope global | awk '{print $4}')
  g4=$(ip -n "$ns" -4 route show default | awk '{print $3; exit}')
  g6=$(ip -n "$ns" -6 route show default | awk '{print $3; exit}')
  gang=$(ip -n "$ns" -4 -o addr show dev ${GANG_IFACE} 2>/dev/null | awk '{print $4}')
fi
{
  echo "link set dev eth0 netns $pid"
  [ -z "$gang" ] || echo "link set dev ${GANG_IFACE} netns $pid"
} | ip -n "$ns" -batch -
printf 'netns delete %s\nnetns attach %s %s\n' "$ns" "$ns" "$pid" | ip -batch -
{
  echo "link set dev lo up"
  for a in $a4; do echo "addr add $a dev eth0"; done
  for a in $a6; do echo "addr add $a dev eth0 nodad"; done
  echo "link set dev eth0 up"
  [ -z "$g4" ] || echo "route replace default via $g4 dev eth0"
  [ -z "$g6" ] || echo "route replace ::/0 via $g6 dev eth0"
  for a in $gang; do echo "addr add $a dev ${GANG_IFACE}"; done
  [ -z "$gang" ] || echo "link set dev ${GANG_IFACE} up"
} | ip -n "$ns" -batch -
`;

/**
 * The hook that gives a user-namespaced container the agent's configured
 * network namespace `netnsPath`; `addresses`, when known, spare it reading them.
 */
export function adoptNetnsHook(netnsPath: string, addresses?: NetnsAddresses): OciHook {
  const given = addresses
    ? [
        addresses.ipv4 ?? "",
        addresses.ipv6 ?? "",
        addresses.gateway4 ?? "",
        addresses.gateway6 ?? "",
        addresses.gang4 ?? "",
      ]
    : [];
  return {
    path: "/bin/sh",
    args: ["sh", "-c", ADOPT_NETNS, "adopt-netns", basename(netnsPath), ...given],
    timeout: 30,
  };
}
