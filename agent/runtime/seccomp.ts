import type { OciSeccomp, SeccompSyscall } from "./oci-types.ts";

// berth's seccomp profile: allow by default, deny a fixed list with EPERM.
// A deny list (not Docker's allow list) keeps new, harmless syscalls working
// on newer kernels/glibc without profile updates; what it blocks is the set of
// calls that reach kernel-global state or are classic escape/attack surface.
// runc loads the filter as the last step before execve (noNewPrivileges is
// set), so none of these are needed by runc init itself.

const EPERM = 1;
const ENOSYS = 38;

/** Denied outright: each reaches state shared with the host or other containers. */
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

export function buildSeccompProfile(nodeArch: string): OciSeccomp {
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
  // clone3 passes flags in a struct seccomp cannot read; ENOSYS makes glibc fall back to clone.
  syscalls.push({ names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: ENOSYS });
  for (const bit of Object.values(UNSAFE_PERSONALITY_BITS)) {
    syscalls.push({
      names: ["personality"],
      action: "SCMP_ACT_ERRNO",
      errnoRet: EPERM,
      args: [{ index: 0, value: bit + PERSONALITY_QUERY_BIT, valueTwo: bit, op: "SCMP_CMP_MASKED_EQ" }],
    });
  }
  return { defaultAction: "SCMP_ACT_ALLOW", architectures: seccompArchitectures(nodeArch), syscalls };
}
