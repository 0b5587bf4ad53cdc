// The container half of the agent's API. The local implementation
// (agent/host/ContainerHost) and the gRPC client (api/grpc/client.ts)
// implement this same interface; protobuf types never leave api/grpc and
// agent/rpc.

import type { EgressPolicy } from "../shared/egress.ts";

export type ContainerState = "created" | "running" | "stopped";
export type ExitReason = "exited" | "oom_killed" | "killed" | "timed_out" | "unknown";

export interface GpuRequest {
  /** How many GPUs. */
  count: number;
  /** Acceptable types in order of preference (e.g. ["H100", "A100"]); empty = any. */
  types?: string[];
  /**
   * Part of one shared GPU (`berth agent --shared-gpus`), in MiB of its
   * memory, instead of whole GPUs; count is then 1. The container runs as an
   * NVIDIA MPS client limited to that memory. @default whole GPUs
   */
  memoryMiB?: number;
}

export interface RunContainerRequest {
  /** Generated (`ctr-...`) when absent. Letters, digits, `_ . -`. */
  id?: string;
  /** Image reference to pull (or already cached / imported); the agent's default image when absent. */
  image?: string;
  /** Registry credentials for the pull; never logged. */
  imageCredentials?: { username: string; password: string };
  /** Command and arguments; the image's entrypoint+cmd when empty. */
  args: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** "uid" or "uid:gid". @default "0:0" */
  user?: string;
  hostname?: string;
  /** CPU cores, fractional allowed. */
  cpu: number;
  memoryBytes: number;
  pidsLimit?: number;
  gpu?: GpuRequest;
  /** @default { mode: "open" } */
  egress?: EgressPolicy;
  /** Container ports the host (and the coordinator's proxy through the agent) may connect to. */
  exposedPorts?: number[];
  /** Host paths bind-mounted in; only under the agent's allowed mount roots. */
  mounts?: { source: string; destination: string; readOnly?: boolean }[];
  /** Workspace volumes (docs/volumes.md): each at /volumes/{name} and at its mountPath. */
  volumes?: VolumeMount[];
  /** S3-compatible buckets mounted with s3fs (docs/buckets.md), each at its mountPath. */
  buckets?: BucketMount[];
  /**
   * A container that is not a runner (a sandbox, a pod) gets the workspace
   * bridge: Output, Queue, Map and Signal over the agent socket at
   * RunnerPaths.socket, for this workspace (docs/sandboxes.md); no tasks.
   */
  bridge?: { workspaceId: string };
  timeoutMs?: number;
  labels?: Record<string, string>;
  /** See ContainerSpec.startupWindowMs. */
  startupWindowMs?: number;
  /** A code archive put with putCode, mounted read-only at RunnerPaths.code (also the working directory). */
  code?: { sha256: string };
  /** Makes this a runner container: see RunnerConfig. */
  runner?: RunnerConfig;
  /**
   * "gvisor": the container runs under runsc, its system calls served by
   * gVisor's kernel; "container": the agent's OCI runtime (runc or crun).
   * See docs/runtime.md, "OCI runtimes". @default "container"
   */
  isolation?: "container" | "gvisor";
  /**
   * false: root inside is the host's root, a workspace opted out
   * (docs/limits.md, "Opting a workspace out"); true: root inside is an
   * unprivileged host uid, in a user namespace. @default true
   */
  userNamespace?: boolean;
  /**
   * The container's system call filter: "allowlist" refuses every call not on
   * the allow list; "denylist" is the older profile, which allows all but a
   * deny list (a workspace opted out). @default "allowlist"
   */
  syscallFilter?: SyscallFilter;
  /**
   * A member of a gang (shared/gang.ts): the agent joins the container to the
   * gang's private network across hosts (interface GANG_IFACE, the rank's
   * address in subnet) and sets the gang environment (gangEnv).
   */
  gang?: GangMember;
}

/** One container's place in a gang spread over several hosts. */
export interface GangMember {
  /** The gang's id; names its network on each host. */
  id: string;
  /** VXLAN network identifier of the gang's network, unique among live gangs (1..16777215). */
  vni: number;
  rank: number;
  size: number;
  /** Each rank's host: the address other agents reach it at (`berth agent --node-address`), index = rank. */
  hosts: string[];
  /** The gang's subnet (IPv4 /24): rank r is its (r+1)-th address. */
  subnet: string;
  /** torch.distributed's MASTER_PORT on rank 0. */
  masterPort: number;
}

/** What a container's seccomp profile is built from (RunContainerRequest.syscallFilter). */
export type SyscallFilter = "allowlist" | "denylist";
export const SYSCALL_FILTERS: readonly SyscallFilter[] = ["allowlist", "denylist"];

/**
 * A volume of the workspace, kept under the agent's volume root at
 * <root>/<workspaceId>/<name> (created on first use). mountPath is relative
 * to the container's working directory unless absolute.
 */
export interface VolumeMount {
  workspaceId: string;
  name: string;
  mountPath: string;
}

/**
 * A cloud bucket (CloudBucket) the agent mounts with s3fs on its host and
 * binds at mountPath (relative to the working directory unless absolute).
 * The keys are the values of the workspace secrets CloudBucketConfig names,
 * resolved by the coordinator; both absent: a public bucket. Never logged
 * or written to the host record.
 */
export interface BucketMount {
  /** The bucket's name at the provider. */
  name: string;
  mountPath: string;
  readOnly?: boolean;
  /** http(s) URL of an S3-compatible service; absent: AWS S3 (https://s3.amazonaws.com). */
  endpoint?: string;
  region?: string;
  accessKey?: string;
  secretKey?: string;
}

/**
 * A runner container takes tasks of one stub through its own bridge socket
 * (docs/tasks.md). The agent mounts the socket and the Python SDK, sets the
 * BERTH_* environment and, when args is empty, runs `python3 -u -m berth.runtime.runner`.
 */
export interface RunnerConfig {
  stubId: string;
  workspaceId: string;
  /** stub.type, e.g. "function". */
  stubType: string;
  /** `module:function`. */
  handler: string;
  onStart?: string;
  pythonVersion?: string;
  callbackUrl?: string;
  /** Exception class names that retry like a crash. */
  retryFor?: string[];
  /** @default 1 */
  workers?: number;
  /** The stub's config_version: the container takes only tasks of that config or an older one. @default unknown: any */
  configVersion?: number;
}

export interface ContainerStatus {
  id: string;
  image: string;
  imageDigest: string;
  state: ContainerState;
  pid: number;
  createdAt: number;
  startedAt?: number;
  exitedAt?: number;
  exitCode?: number;
  reason?: ExitReason;
  labels: Record<string, string>;
  cpu: number;
  memoryBytes: number;
  /** UUIDs of the GPUs assigned exclusively to this container (or the shared GPU it has a share of). */
  gpus: string[];
  /** Set when `gpus` is a share of a shared GPU: the MiB of its memory (docs/gpus.md, "Shared GPUs"). */
  gpuMemoryMiB?: number;
  ipv4?: string;
  ipv6?: string;
  egress: EgressPolicy;
  exposedPorts: number[];
}

export interface LogEntry {
  containerId: string;
  stream: "stdout" | "stderr";
  line: string;
  /** ms since epoch */
  ts: number;
}

export interface ExecRequest {
  args: string[];
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  /** Allocate a terminal (for interactive shells). @default false */
  tty?: boolean;
}

export type ExecOutput = { stream: "stdout" | "stderr"; data: Uint8Array };

/** A running exec: stream its output, feed stdin, wait for its exit code. */
export interface ExecSession {
  output: AsyncIterable<ExecOutput>;
  writeStdin(data: Uint8Array): void;
  closeStdin(): void;
  /** Terminal size, when tty was asked for. */
  resize?(cols: number, rows: number): void;
  kill(signal?: NodeJS.Signals): void;
  /** Resolves with the exit code (128+signo when killed by a signal). */
  exit: Promise<number>;
}

export interface ImageSummary {
  ref: string;
  refs: string[];
  digest: string;
  sizeBytes: number;
  pulledAt: string;
  inUse: boolean;
}

/**
 * What an import reads: "auto" takes a directory or a plain filesystem
 * tarball as a rootfs, and an OCI or `docker save` archive as what it is.
 */
/** How ImportImage reads its file; "auto" looks at the file itself. */
export const IMAGE_IMPORT_KINDS = ["auto", "oci-archive", "docker-archive", "rootfs"] as const;
export type ImageImportKind = (typeof IMAGE_IMPORT_KINDS)[number];

export function isImageImportKind(k: string): k is ImageImportKind {
  return (IMAGE_IMPORT_KINDS as readonly string[]).includes(k);
}

export interface ImportImageRequest {
  /** Absolute path on the agent's host (a file or, for a rootfs, a directory). */
  path: string;
  /** The reference the image is known by afterwards, e.g. "python:3.11". */
  name: string;
  /** @default "auto" */
  kind?: ImageImportKind;
}

export interface ImageGcResult {
  /** Digests of the images removed. */
  removedImages: string[];
  /** Bytes of unpacked rootfs dirs and layer blobs deleted. */
  freedBytes: number;
}

export interface ContainerApi {
  runContainer(req: RunContainerRequest): Promise<ContainerStatus>;
  /** SIGTERM, grace, SIGKILL; with remove, also frees everything the container held. */
  stopContainer(id: string, opts?: { graceMs?: number; remove?: boolean }): Promise<ContainerStatus>;
  getContainer(id: string): Promise<ContainerStatus>;
  listContainers(filter?: { labels?: Record<string, string> }): Promise<ContainerStatus[]>;
  /** Past lines (tail) and, with follow, new ones until the container ends or the signal aborts. */
  streamLogs(
    id: string,
    opts?: { follow?: boolean; tail?: number; signal?: AbortSignal },
  ): AsyncIterable<LogEntry>;
  exec(id: string, req: ExecRequest): Promise<ExecSession>;
  pullImage(
    ref: string,
    opts?: { credentials?: { username: string; password: string } },
  ): Promise<ImageSummary>;
  listImages(): Promise<ImageSummary[]>;
  removeImage(ref: string): Promise<void>;
  /** Adds an image from a file or directory already on the agent's host (air-gapped hosts). */
  importImage(req: ImportImageRequest): Promise<ImageSummary>;
  /**
   * Frees disk: work left by killed pulls and unreferenced blobs always; with
   * unusedForMs, also images no container uses and none has used for that
   * long. Images in use and the agent's default image are never removed.
   */
  gcImages(opts?: { unusedForMs?: number }): Promise<ImageGcResult>;
  setNetworkPolicy(id: string, policy: EgressPolicy): Promise<ContainerStatus>;
  /**
   * Opens a port of a running container to the host (and so to the agent's
   * tunnel), as RunContainerRequest.exposedPorts does at start. Opening a
   * port already open changes nothing.
   */
  exposePort(id: string, port: number): Promise<ContainerStatus>;
  /** Whether the code archive with this sha256 (hex) is unpacked on this host. */
  hasCode(sha256: string): Promise<boolean>;
  /** Stores and unpacks a code archive (tar.gz of regular files and directories); the hash is checked. */
  putCode(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void>;
}
