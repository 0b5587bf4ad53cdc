// oci-spec.ts imports this module too; CONTAINER_CAPABILITIES is read only
// when a profile is built, after both modules have loaded.
import { CONTAINER_CAPABILITIES } from "./oci-spec.ts";
import type { OciSeccomp, SeccompSyscall } from "./oci-types.ts";
import { ALLOWED_SYSCALL_GROUPS, ARCH_SYSCALLS, CAPABILITY_SYSCALLS } from "./seccomp-allowlist.ts";

// berth's seccomp profiles (docs/runtime.md, "Seccomp").
// - "allowlist" (the default): refuse with EPERM every call not allowed,
//   the allowed set being containerd's default list for berth's capabilities.
//   Containers of different tenants share the host kernel; a call added by a
//   new kernel stays closed until it is reviewed.
// - "denylist": allow by default and refuse a fixed list with EPERM; what a
//   workspace may be set back to when a workload needs a call the allowlist
//   lacks.
// runc loads the filter as the last step before execve (noNewPrivileges is
// set), so runc init itself needs none of the refused calls.

export const SECCOMP_FILTERS = ["allowlist", "denylist"] as const;
export type SeccompFilter = (typeof SECCOMP_FILTERS)[number];

const EPERM = 1;
const ENOSYS = 38;

/**
 * Refused by both profiles (the allowlist never allows them, the denylist
 * names them): each reaches state shared with the host or other containers.
 */
export const DENIED_SYSCALLS: readonly string[] = [
  // kernel code and reboot
  "kexec_load",
  "kexec_file_load",
  "init_module",
  "finit_module",
  "delete_module",
  "create_module",
  "get_kernel_syms",
  "query_module",
  "reboot",
  // filesystems and namespaces (also blocked by missing CAP_SYS_ADMIN; seccomp is the second wall)
  "mount",
  "umount",
  "umount2",
  "mount_setattr",
  "move_mount",
  "open_tree",
  "fsopen",
  "fsconfig",
  "fsmount",
  "fspick",
  "pivot_root",
  "setns",
  "unshare",
  "swapon",
  "swapoff",
  "quotactl",
  "quotactl_fd",
  "nfsservctl",
  "sysfs",
  "_sysctl",
  "ustat",
  "uselib",
  // file handles bypass path permission checks (the "shocker" escape)
  "open_by_handle_at",
  "name_to_handle_at",
  // the kernel keyring is not namespaced
  "keyctl",
  "add_key",
  "request_key",
  // tracing and kernel introspection
  "bpf",
  "perf_event_open",
  "lookup_dcookie",
  "syslog",
  "acct",
  "userfaultfd",
  // host clock
  "settimeofday",
  "stime",
  "clock_settime",
  "clock_adjtime",
  "adjtimex",
  // raw port I/O and legacy x86 modes
  "iopl",
  "ioperm",
  "vm86",
  "vm86old",
  // io_uring has been a steady source of kernel CVEs; Docker blocks it too
  "io_uring_setup",
  "io_uring_enter",
  "io_uring_register",
];

// clone(2) flags that create namespaces (arg 0 on x86_64 and aarch64).
const NAMESPACE_CLONE_FLAGS = {
  CLONE_NEWNS: 0x00020000,
  CLONE_NEWCGROUP: 0x02000000,
  CLONE_NEWUTS: 0x04000000,
  CLONE_NEWIPC: 0x08000000,
  CLONE_NEWUSER: 0x10000000,
  CLONE_NEWPID: 0x20000000,
  CLONE_NEWNET: 0x40000000,
};

// personality(2) bits that weaken ASLR or NX. The query value 0xffffffff has
// every bit set; no real persona sets bit 31, so each rule requires it clear
// (libseccomp cannot AND two comparisons on one argument reliably).
const UNSAFE_PERSONALITY_BITS = {
  ADDR_NO_RANDOMIZE: 0x0040000,
  MMAP_PAGE_ZERO: 0x0100000,
  ADDR_COMPAT_LAYOUT: 0x0200000,
  READ_IMPLIES_EXEC: 0x0400000,
};
const PERSONALITY_QUERY_BIT = 0x80000000;

const ARCHITECTURES: Record<string, string[]> = {
  x64: ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
  arm64: ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
};

/** Seccomp architectures for a Node `process.arch` value. */
export function seccompArchitectures(nodeArch: string): string[] {
  const archs = ARCHITECTURES[nodeArch];
  if (!archs) throw new Error(`no seccomp architecture list for ${nodeArch}`);
  return archs;
}

/**
 * The seccomp profile of a container's config.json. `capabilities` are the
 * container's bounding set: a call gated on a capability (as in containerd's
 * profile) is allowed only with it.
 */
export function buildSeccompProfile(
  nodeArch: string,
  filter: SeccompFilter = "allowlist",
  capabilities: readonly string[] = CONTAINER_CAPABILITIES,
): OciSeccomp {
  const architectures = seccompArchitectures(nodeArch);
  if (filter === "denylist")
    return { defaultAction: "SCMP_ACT_ALLOW", architectures, syscalls: denylistRules() };
  if (filter !== "allowlist") throw new Error(`unknown seccomp filter ${filter}`);
  return {
    defaultAction: "SCMP_ACT_ERRNO",
    defaultErrnoRet: EPERM,
    architectures,
    syscalls: allowlistRules(nodeArch, capabilities),
  };
}

/** Every name the allowlist profile allows without argument conditions. */
function allowedSyscalls(
  nodeArch: string,
  capabilities: readonly string[] = CONTAINER_CAPABILITIES,
): string[] {
  const denied = new Set(DENIED_SYSCALLS);
  const names = [
    ...Object.values(ALLOWED_SYSCALL_GROUPS).flat(),
    ...(ARCH_SYSCALLS[nodeArch] ?? []),
    ...capabilities.flatMap((cap) => CAPABILITY_SYSCALLS[cap] ?? []),
  ];
  return [...new Set(names)].filter((n) => !denied.has(n));
}

const AF_VSOCK = 40;
const NAMESPACE_CLONE_MASK = Object.values(NAMESPACE_CLONE_FLAGS).reduce((a, b) => a | b, 0);

// personality(2) values allowed: PER_LINUX, PER_LINUX32, UNAME26 with
// either, and the query 0xffffffff. Any other persona (ASLR off,
// READ_IMPLIES_EXEC, ...) gets the default EPERM.
const SAFE_PERSONALITIES = [0x0, 0x0008, 0x20000, 0x20008, 0xffffffff];

function allowlistRules(nodeArch: string, capabilities: readonly string[]): SeccompSyscall[] {
  return [
    { names: allowedSyscalls(nodeArch, capabilities), action: "SCMP_ACT_ALLOW" },
    // vsock reaches the hypervisor or the host, outside the container's network namespace.
    { names: ["socket"], action: "SCMP_ACT_ALLOW", args: [{ index: 0, value: AF_VSOCK, op: "SCMP_CMP_NE" }] },
    // clone without any namespace flag (arg 0 on x86_64 and aarch64); with one it gets EPERM.
    {
      names: ["clone"],
      action: "SCMP_ACT_ALLOW",
      args: [{ index: 0, value: NAMESPACE_CLONE_MASK, valueTwo: 0, op: "SCMP_CMP_MASKED_EQ" }],
    },
    // clone3 passes flags in a struct seccomp cannot read; ENOSYS makes glibc fall back to clone.
    { names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: ENOSYS },
    ...SAFE_PERSONALITIES.map(
      (value): SeccompSyscall => ({
        names: ["personality"],
        action: "SCMP_ACT_ALLOW",
        args: [{ index: 0, value, op: "SCMP_CMP_EQ" }],
      }),
    ),
  ];
}

function denylistRules(): SeccompSyscall[] {
  const syscalls: SeccompSyscall[] = [
    { names: [...DENIED_SYSCALLS], action: "SCMP_ACT_ERRNO", errnoRet: EPERM },
  ];
  for (const flag of Object.values(NAMESPACE_CLONE_FLAGS)) {
    syscalls.push({
      names: ["clone"],
      action: "SCMP_ACT_ERRNO",
      errnoRet: EPERM,
      args: [{ index: 0, value: flag, valueTwo: flag, op: "SCMP_CMP_MASKED_EQ" }],
    });
  }
  syscalls.push({ names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: ENOSYS });
  for (const bit of Object.values(UNSAFE_PERSONALITY_BITS)) {
    syscalls.push({
      names: ["personality"],
      action: "SCMP_ACT_ERRNO",
      errnoRet: EPERM,
      args: [{ index: 0, value: bit + PERSONALITY_QUERY_BIT, valueTwo: bit, op: "SCMP_CMP_MASKED_EQ" }],
    });
  }
  return syscalls;
}
