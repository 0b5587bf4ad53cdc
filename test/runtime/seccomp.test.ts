import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { CONTAINER_CAPABILITIES } from "../../agent/runtime/oci-spec.ts";
import type { OciSeccomp, SeccompSyscall } from "../../agent/runtime/oci-types.ts";
import { buildSeccompProfile, DENIED_SYSCALLS, type SeccompFilter } from "../../agent/runtime/seccomp.ts";
import { ALLOWED_SYSCALL_GROUPS, CAPABILITY_SYSCALLS } from "../../agent/runtime/seccomp-allowlist.ts";

// The profiles as data: no root, no runc (runtime.test.ts runs them in containers).

const EPERM = 1;
const ENOSYS = 38;
const ALL_CAPABILITIES = Object.keys(CAPABILITY_SYSCALLS);

const rulesFor = (p: OciSeccomp, name: string): SeccompSyscall[] =>
  p.syscalls.filter((r) => r.names.includes(name));
/** Names an ALLOW rule lets through, conditionally or not. */
const allowedNames = (p: OciSeccomp): Set<string> =>
  new Set(p.syscalls.filter((r) => r.action === "SCMP_ACT_ALLOW").flatMap((r) => r.names));
/** Names an ALLOW rule lets through whatever their arguments. */
const unconditionallyAllowed = (p: OciSeccomp): Set<string> =>
  new Set(p.syscalls.filter((r) => r.action === "SCMP_ACT_ALLOW" && !r.args?.length).flatMap((r) => r.names));

test("the default profile refuses every call it does not name with EPERM", () => {
  for (const arch of ["x64", "arm64"]) {
    const p = buildSeccompProfile(arch);
    assert.equal(p.defaultAction, "SCMP_ACT_ERRNO");
    assert.equal(p.defaultErrnoRet, EPERM);
    assert.deepEqual(p, buildSeccompProfile(arch, "allowlist"));
    // Nothing is allowed by a rule that also carries an errno, and the only errno rule is clone3's.
    const errnoRules = p.syscalls.filter((r) => r.action !== "SCMP_ACT_ALLOW");
    assert.deepEqual(errnoRules, [{ names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: ENOSYS }]);
  }
  assert.deepEqual(buildSeccompProfile("x64").architectures, [
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X32",
  ]);
  assert.deepEqual(buildSeccompProfile("arm64").architectures, ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]);
});

test("no call of the deny list is allowed, whatever the capabilities", () => {
  for (const arch of ["x64", "arm64"]) {
    for (const caps of [CONTAINER_CAPABILITIES, ALL_CAPABILITIES]) {
      const allowed = allowedNames(buildSeccompProfile(arch, "allowlist", caps));
      for (const name of DENIED_SYSCALLS) assert.ok(!allowed.has(name), `${arch}: ${name} is allowed`);
    }
  }
  // Spelled out, so a shrunk deny list cannot pass silently.
  for (const name of [
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "mount",
    "unshare",
    "setns",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
  ]) {
    assert.ok(DENIED_SYSCALLS.includes(name), name);
  }
});

test("the allowlist covers ordinary work and each name once", () => {
  const p = buildSeccompProfile("x64");
  const allowed = unconditionallyAllowed(p);
  for (const name of [
    "read",
    "write",
    "openat",
    "mmap",
    "futex",
    "execve",
    "wait4",
    "epoll_pwait",
    "getrandom",
    "rt_sigaction",
    "connect",
    "sendmsg",
    "pipe2",
    "rseq",
    "prlimit64",
    "ptrace",
    "process_vm_readv",
  ]) {
    assert.ok(allowed.has(name), name);
  }
  const grouped = Object.values(ALLOWED_SYSCALL_GROUPS).flat();
  assert.equal(new Set(grouped).size, grouped.length, "a name is in two groups");
  const [plain] = p.syscalls;
  assert.equal(new Set(plain?.names).size, plain?.names.length);
});

test("architecture-only calls follow the host's architecture", () => {
  const x64 = unconditionallyAllowed(buildSeccompProfile("x64"));
  const arm64 = unconditionallyAllowed(buildSeccompProfile("arm64"));
  assert.ok(x64.has("arch_prctl") && x64.has("modify_ldt"));
  assert.ok(!arm64.has("arch_prctl") && !arm64.has("modify_ldt"));
  for (const name of ["set_tls", "cacheflush", "breakpoint", "arm_fadvise64_64", "sync_file_range2"]) {
    assert.ok(arm64.has(name) && !x64.has(name), name);
  }
  assert.throws(() => buildSeccompProfile("riscv64"), /no seccomp architecture list for riscv64/);
  assert.throws(() => buildSeccompProfile("x64", "open" as SeccompFilter), /unknown seccomp filter open/);
});

test("capability-gated calls are allowed only with the capability", () => {
  assert.ok(CONTAINER_CAPABILITIES.includes("CAP_SYS_CHROOT"));
  const berth = unconditionallyAllowed(buildSeccompProfile("x64"));
  assert.ok(berth.has("chroot"), "berth grants CAP_SYS_CHROOT");
  for (const [cap, names] of Object.entries(CAPABILITY_SYSCALLS)) {
    if (CONTAINER_CAPABILITIES.includes(cap)) continue;
    for (const name of names) assert.ok(!berth.has(name), `${name} needs ${cap}`);
  }
  const withNice = unconditionallyAllowed(buildSeccompProfile("x64", "allowlist", ["CAP_SYS_NICE"]));
  assert.ok(withNice.has("mbind") && !withNice.has("chroot"));
  const withAdmin = unconditionallyAllowed(buildSeccompProfile("x64", "allowlist", ["CAP_SYS_ADMIN"]));
  assert.ok(withAdmin.has("sethostname"));
  assert.ok(!withAdmin.has("mount") && !withAdmin.has("clone"), "the deny list and clone's rule still hold");
});

test("clone without namespace flags, safe personas and sockets other than vsock are allowed", () => {
  const p = buildSeccompProfile("arm64");
  assert.deepEqual(rulesFor(p, "clone"), [
    {
      names: ["clone"],
      action: "SCMP_ACT_ALLOW",
      args: [{ index: 0, value: 0x7e020000, valueTwo: 0, op: "SCMP_CMP_MASKED_EQ" }],
    },
  ]);
  assert.deepEqual(
    rulesFor(p, "personality").map((r) => [r.action, r.args]),
    [0, 8, 0x20000, 0x20008, 0xffffffff].map((value) => [
      "SCMP_ACT_ALLOW",
      [{ index: 0, value, op: "SCMP_CMP_EQ" }],
    ]),
  );
  assert.deepEqual(rulesFor(p, "socket"), [
    { names: ["socket"], action: "SCMP_ACT_ALLOW", args: [{ index: 0, value: 40, op: "SCMP_CMP_NE" }] },
  ]);
});

test("the denylist filter is the allow-by-default profile berth used before the allowlist", () => {
  // The fixture is that profile's config.json section, written out once; it must not drift.
  const before = JSON.parse(
    readFileSync(join(import.meta.dirname, "fixtures/seccomp-denylist-x64.json"), "utf8"),
  );
  assert.deepEqual(buildSeccompProfile("x64", "denylist"), before);
  const arm = buildSeccompProfile("arm64", "denylist");
  assert.deepEqual(arm, { ...before, architectures: ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"] });
  assert.equal(arm.defaultAction, "SCMP_ACT_ALLOW");
  assert.deepEqual(rulesFor(arm, "keyctl"), [
    { names: [...DENIED_SYSCALLS], action: "SCMP_ACT_ERRNO", errnoRet: EPERM },
  ]);
});
