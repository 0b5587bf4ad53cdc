// The subset of the OCI runtime spec (v1.0.2, linux) that berth writes.
// Field names are the spec's JSON names.

export interface OciSpec {
  ociVersion: string;
  process: OciProcess;
  root: { path: string; readonly?: boolean };
  hostname?: string;
  mounts: OciMount[];
  linux: OciLinux;
  hooks?: OciHooks;
  annotations?: Record<string, string>;
}

/** One hook: `path` resolves on the host; it gets the container's state on stdin. */
export interface OciHook {
  path: string;
  args?: string[];
  env?: string[];
  /** Seconds. */
  timeout?: number;
}

/** The OCI hook phases (createRuntime, createContainer, ...: config.json's hooks). */
export type OciHookPhase =
  | "prestart"
  | "createRuntime"
  | "createContainer"
  | "startContainer"
  | "poststart"
  | "poststop";

/** The phases in the order OCI runs them. */
export const OCI_HOOK_PHASES: readonly OciHookPhase[] = [
  "prestart",
  "createRuntime",
  "createContainer",
  "startContainer",
  "poststart",
  "poststop",
];

export type OciHooks = Partial<Record<OciHookPhase, OciHook[]>>;

export interface OciProcess {
  terminal: boolean;
  user: { uid: number; gid: number; additionalGids?: number[] };
  args: string[];
  env: string[];
  cwd: string;
  capabilities: {
    bounding: string[];
    effective: string[];
    inheritable: string[];
    permitted: string[];
    ambient: string[];
  };
  rlimits: OciRlimit[];
  noNewPrivileges: boolean;
  oomScoreAdj?: number;
}

export interface OciRlimit {
  type: string;
  hard: number;
  soft: number;
}

export interface OciMount {
  destination: string;
  type: string;
  source: string;
  options?: string[];
}

export interface OciLinuxDevice {
  path: string;
  type: "c" | "b";
  major: number;
  minor: number;
  fileMode?: number;
  uid?: number;
  gid?: number;
}

export interface OciDeviceCgroup {
  allow: boolean;
  type?: "a" | "c" | "b";
  major?: number;
  minor?: number;
  access?: string;
}

export interface OciResources {
  devices: OciDeviceCgroup[];
  memory?: { limit?: number; swap?: number };
  cpu?: { shares?: number; quota?: number; period?: number };
  pids?: { limit: number };
}

export type OciNamespaceType = "pid" | "network" | "mount" | "ipc" | "uts" | "user" | "cgroup";

export interface OciNamespace {
  type: OciNamespaceType;
  path?: string;
}

export type SeccompAction = "SCMP_ACT_ALLOW" | "SCMP_ACT_ERRNO" | "SCMP_ACT_KILL" | "SCMP_ACT_TRAP";

export type SeccompOperator =
  | "SCMP_CMP_NE"
  | "SCMP_CMP_LT"
  | "SCMP_CMP_LE"
  | "SCMP_CMP_EQ"
  | "SCMP_CMP_GE"
  | "SCMP_CMP_GT"
  | "SCMP_CMP_MASKED_EQ";

export interface SeccompArg {
  index: number;
  value: number;
  valueTwo?: number;
  op: SeccompOperator;
}

export interface SeccompSyscall {
  names: string[];
  action: SeccompAction;
  errnoRet?: number;
  args?: SeccompArg[];
}

export interface OciSeccomp {
  defaultAction: SeccompAction;
  /** The errno of an SCMP_ACT_ERRNO default action (runc's own default is EPERM). */
  defaultErrnoRet?: number;
  architectures: string[];
  syscalls: SeccompSyscall[];
}

/** One range of a user namespace's mapping: containerID.. inside is hostID.. outside. */
export interface OciIdMapping {
  containerID: number;
  hostID: number;
  size: number;
}

export interface OciLinux {
  namespaces: OciNamespace[];
  uidMappings?: OciIdMapping[];
  gidMappings?: OciIdMapping[];
  devices: OciLinuxDevice[];
  cgroupsPath: string;
  resources: OciResources;
  seccomp: OciSeccomp;
  maskedPaths: string[];
  readonlyPaths: string[];
}
