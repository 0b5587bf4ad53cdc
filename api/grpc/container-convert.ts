// fromProto/toProto for the container messages of agent.proto. Requests are
// decoded on the agent (a bad one is the caller's invalid_request); replies
// are decoded on the client (a bad one is the agent's internal error). Empty
// maps and lists on the wire read as "not given", so optional fields stay
// absent rather than becoming {} or [].

import { BerthError } from "../../shared/errors.ts";
import { type EgressPolicy, validateEgressPolicy } from "../../shared/egress.ts";
import type {
  BucketMount,
  ContainerState,
  ContainerStatus,
  ExecRequest,
  ExitReason,
  GangMember,
  ImageSummary,
  LogEntry,
  RunContainerRequest,
  RunnerConfig,
} from "../containers.ts";

type WireContainerState =
  | "CONTAINER_STATE_UNSPECIFIED"
  | "CONTAINER_STATE_CREATED"
  | "CONTAINER_STATE_RUNNING"
  | "CONTAINER_STATE_STOPPED";
type WireExitReason =
  | "EXIT_REASON_UNSPECIFIED"
  | "EXIT_REASON_EXITED"
  | "EXIT_REASON_OOM_KILLED"
  | "EXIT_REASON_KILLED"
  | "EXIT_REASON_TIMED_OUT"
  | "EXIT_REASON_UNKNOWN";
type WireEgressMode =
  | "EGRESS_MODE_UNSPECIFIED"
  | "EGRESS_MODE_OPEN"
  | "EGRESS_MODE_BLOCK"
  | "EGRESS_MODE_ALLOW";
type WireLogStream = "LOG_STREAM_UNSPECIFIED" | "LOG_STREAM_STDOUT" | "LOG_STREAM_STDERR";

export interface WireEgressPolicy {
  mode: WireEgressMode;
  cidrs: string[];
}

export interface WireCredentials {
  username: string;
  password: string;
}

export interface WireRunContainerRequest {
  id?: string;
  image?: string;
  imageCredentials?: WireCredentials | null;
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  user?: string;
  hostname?: string;
  cpu: number;
  memoryBytes: number;
  pidsLimit?: number;
  gpu?: { count: number; types: string[]; memoryMib?: number } | null;
  egress?: WireEgressPolicy | null;
  exposedPorts: number[];
  mounts: { source: string; destination: string; readOnly?: boolean }[];
  timeoutMs?: number;
  labels: Record<string, string>;
  startupWindowMs?: number;
  code?: { sha256: string } | null;
  runner?: WireRunnerConfig | null;
  volumes?: { workspaceId: string; name: string; mountPath: string }[];
  buckets?: WireBucketMount[];
  bridge?: { workspaceId: string } | null;
  isolation?: string;
  userNamespace?: boolean;
  syscallFilter?: string;
  gang?: WireGangMember | null;
}

export interface WireGangMember {
  id: string;
  vni: number;
  rank: number;
  size: number;
  hosts: string[];
  subnet: string;
  masterPort: number;
}

export interface WireBucketMount {
  name: string;
  mountPath: string;
  readOnly: boolean;
  endpoint?: string;
  region?: string;
  accessKey?: string;
  secretKey?: string;
}

function bucketToWire(b: BucketMount): WireBucketMount {
  return defined<WireBucketMount>({
    name: b.name,
    mountPath: b.mountPath,
    readOnly: b.readOnly === true,
    endpoint: b.endpoint,
    region: b.region,
    accessKey: b.accessKey,
    secretKey: b.secretKey,
  });
}

function bucketFromWire(w: WireBucketMount): BucketMount {
  return defined<BucketMount>({
    name: w.name,
    mountPath: w.mountPath,
    readOnly: w.readOnly || undefined,
    endpoint: w.endpoint,
    region: w.region,
    accessKey: w.accessKey,
    secretKey: w.secretKey,
  });
}

export interface WireRunnerConfig {
  stubId: string;
  workspaceId: string;
  stubType: string;
  handler: string;
  onStart?: string;
  pythonVersion?: string;
  callbackUrl?: string;
  retryFor: string[];
  workers?: number;
  configVersion?: number;
}

export interface WireContainer {
  id: string;
  image: string;
  imageDigest: string;
  state: WireContainerState;
  pid: number;
  createdAt: number;
  startedAt?: number;
  exitedAt?: number;
  exitCode?: number;
  reason: WireExitReason;
  labels: Record<string, string>;
  cpu: number;
  memoryBytes: number;
  gpus: string[];
  gpuMemoryMib?: number | null;
  ipv4?: string;
  ipv6?: string;
  egress?: WireEgressPolicy | null;
  exposedPorts: number[];
}

export interface WireLogEntry {
  containerId: string;
  stream: WireLogStream;
  line: string;
  ts: number;
}

export interface WireExecRequest {
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  user?: string;
  tty?: boolean;
}

export interface WireImage {
  ref: string;
  refs: string[];
  digest: string;
  sizeBytes: number;
  pulledAt: string;
  inUse: boolean;
}

/** Who gets the blame when a message does not decode. */
export type Side = "request" | "reply";

function bad(side: Side, what: string): BerthError {
  return side === "request"
    ? new BerthError("invalid_request", `malformed request: ${what}`)
    : new BerthError("internal", `the agent sent a malformed reply: ${what}`);
}

// Values protobuf would silently mangle (negative, fractional, too large) are
// refused before encoding.
// `code`: invalid_request when encoding the caller's request, internal when
// the agent encodes its own reply.
type Code = "invalid_request" | "internal";

function uint(value: number, field: string, code: Code, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isSafeInteger(value) || value < 0 || value > max) {
    throw new BerthError(code, `${field} must be an integer in 0..${max}, got ${value}`);
  }
  return value;
}

const UINT32 = 0xffff_ffff;

function int32(value: number, field: string, code: Code): number {
  if (!Number.isInteger(value) || value < -0x8000_0000 || value > 0x7fff_ffff) {
    throw new BerthError(code, `${field} must be a 32-bit integer, got ${value}`);
  }
  return value;
}

function finiteNonNegative(value: number, field: string, code: Code): number {
  if (!Number.isFinite(value) || value < 0) {
    throw new BerthError(code, `${field} must be a non-negative number, got ${value}`);
  }
  return value;
}

const nonEmpty = <T extends object>(o: T | undefined): T | undefined =>
  o && Object.keys(o).length > 0 ? o : undefined;

/** Copies the keys whose value is defined, so absent stays absent. */
function defined<T extends object>(o: T): T {
  const out = {} as T;
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}

const STATE_TO_WIRE: Record<ContainerState, WireContainerState> = {
  created: "CONTAINER_STATE_CREATED",
  running: "CONTAINER_STATE_RUNNING",
  stopped: "CONTAINER_STATE_STOPPED",
};
const REASON_TO_WIRE: Record<ExitReason, WireExitReason> = {
  exited: "EXIT_REASON_EXITED",
  oom_killed: "EXIT_REASON_OOM_KILLED",
  killed: "EXIT_REASON_KILLED",
  timed_out: "EXIT_REASON_TIMED_OUT",
  unknown: "EXIT_REASON_UNKNOWN",
};

function reverse<K extends string, V extends string>(m: Record<K, V>): Map<string, K> {
  return new Map(Object.entries(m).map(([k, v]) => [v as string, k as K]));
}
const STATE_FROM_WIRE = reverse(STATE_TO_WIRE);
const REASON_FROM_WIRE = reverse(REASON_TO_WIRE);

export function egressToProto(p: EgressPolicy): WireEgressPolicy {
  switch (p.mode) {
    case "open":
      return { mode: "EGRESS_MODE_OPEN", cidrs: [] };
    case "block":
      return { mode: "EGRESS_MODE_BLOCK", cidrs: [] };
    case "allow":
      return { mode: "EGRESS_MODE_ALLOW", cidrs: [...p.cidrs] };
  }
  throw new BerthError(
    "invalid_request",
    `egress mode ${JSON.stringify((p as { mode: unknown }).mode)} is unknown`,
  );
}

export function egressFromProto(w: WireEgressPolicy, side: Side): EgressPolicy {
  if (w.mode !== "EGRESS_MODE_ALLOW" && w.cidrs.length > 0) {
    throw bad(side, `egress ${w.mode} cannot carry CIDRs (only EGRESS_MODE_ALLOW does)`);
  }
  switch (w.mode) {
    case "EGRESS_MODE_OPEN":
      return { mode: "open" };
    case "EGRESS_MODE_BLOCK":
      return { mode: "block" };
    case "EGRESS_MODE_ALLOW":
      // The agent checks the CIDRs by the same rules as the public API.
      return side === "request"
        ? validateEgressPolicy({ mode: "allow", cidrs: w.cidrs })
        : { mode: "allow", cidrs: [...w.cidrs] };
  }
  throw bad(side, `egress mode is ${w.mode}`);
}

export function runRequestToProto(r: RunContainerRequest): WireRunContainerRequest {
  // The wire's bool would read any truthy value as true: a mistyped opt-out must not become the default.
  if (r.userNamespace !== undefined && typeof r.userNamespace !== "boolean")
    throw new BerthError(
      "invalid_request",
      `userNamespace must be true or false, got ${JSON.stringify(r.userNamespace)}`,
    );
  return defined<WireRunContainerRequest>({
    id: r.id,
    image: r.image,
    imageCredentials: r.imageCredentials
      ? { username: r.imageCredentials.username, password: r.imageCredentials.password }
      : null,
    args: [...(r.args ?? [])],
    env: { ...r.env },
    cwd: r.cwd,
    user: r.user,
    hostname: r.hostname,
    cpu: finiteNonNegative(r.cpu, "cpu", "invalid_request"),
    memoryBytes: uint(r.memoryBytes, "memoryBytes", "invalid_request"),
    pidsLimit:
      r.pidsLimit === undefined ? undefined : uint(r.pidsLimit, "pidsLimit", "invalid_request", UINT32),
    gpu: r.gpu
      ? {
          count: uint(r.gpu.count, "gpu.count", "invalid_request", UINT32),
          types: [...(r.gpu.types ?? [])],
          ...(r.gpu.memoryMiB !== undefined
            ? { memoryMib: uint(r.gpu.memoryMiB, "gpu.memoryMiB", "invalid_request", UINT32) }
            : {}),
        }
      : null,
    egress: r.egress ? egressToProto(r.egress) : null,
    exposedPorts: (r.exposedPorts ?? []).map((p, i) =>
      uint(p, `exposedPorts[${i}]`, "invalid_request", 65535),
    ),
    mounts: (r.mounts ?? []).map((m) =>
      defined({ source: m.source, destination: m.destination, readOnly: m.readOnly }),
    ),
    timeoutMs: r.timeoutMs === undefined ? undefined : uint(r.timeoutMs, "timeoutMs", "invalid_request"),
    labels: { ...r.labels },
    startupWindowMs:
      r.startupWindowMs === undefined
        ? undefined
        : uint(r.startupWindowMs, "startupWindowMs", "invalid_request"),
    code: r.code ? { sha256: r.code.sha256 } : null,
    runner: r.runner ? runnerToProto(r.runner) : null,
    volumes: (r.volumes ?? []).map((v) => ({
      workspaceId: v.workspaceId,
      name: v.name,
      mountPath: v.mountPath,
    })),
    buckets: (r.buckets ?? []).map(bucketToWire),
    bridge: r.bridge ? { workspaceId: r.bridge.workspaceId } : null,
    isolation: r.isolation,
    userNamespace: r.userNamespace,
    syscallFilter: r.syscallFilter,
    gang: r.gang ? gangToProto(r.gang) : null,
  });
}

// Only what the wire cannot carry is refused here; the agent checks the rest
// (validateGangMember) like every other field.
function gangToProto(g: GangMember): WireGangMember {
  return {
    id: g.id,
    vni: uint(g.vni, "gang.vni", "invalid_request", UINT32),
    rank: uint(g.rank, "gang.rank", "invalid_request", UINT32),
    size: uint(g.size, "gang.size", "invalid_request", UINT32),
    hosts: [...(g.hosts ?? [])],
    subnet: g.subnet,
    masterPort: uint(g.masterPort, "gang.masterPort", "invalid_request", 65535),
  };
}

function runnerToProto(r: RunnerConfig): WireRunnerConfig {
  return defined<WireRunnerConfig>({
    stubId: r.stubId,
    workspaceId: r.workspaceId,
    stubType: r.stubType,
    handler: r.handler,
    onStart: r.onStart,
    pythonVersion: r.pythonVersion,
    callbackUrl: r.callbackUrl,
    retryFor: [...(r.retryFor ?? [])],
    workers:
      r.workers === undefined ? undefined : uint(r.workers, "runner.workers", "invalid_request", UINT32),
    configVersion:
      r.configVersion === undefined
        ? undefined
        : uint(r.configVersion, "runner.configVersion", "invalid_request", UINT32),
  });
}

function runnerFromProto(w: WireRunnerConfig): RunnerConfig {
  return defined<RunnerConfig>({
    stubId: w.stubId,
    workspaceId: w.workspaceId,
    stubType: w.stubType,
    handler: w.handler,
    onStart: w.onStart,
    pythonVersion: w.pythonVersion,
    callbackUrl: w.callbackUrl,
    retryFor: w.retryFor.length ? [...w.retryFor] : undefined,
    workers: w.workers,
    configVersion: w.configVersion,
  });
}

export function runRequestFromProto(w: WireRunContainerRequest): RunContainerRequest {
  const r: RunContainerRequest = defined<RunContainerRequest>({
    id: w.id,
    image: w.image,
    imageCredentials: w.imageCredentials
      ? { username: w.imageCredentials.username, password: w.imageCredentials.password }
      : undefined,
    args: w.args,
    env: nonEmpty(w.env),
    cwd: w.cwd,
    user: w.user,
    hostname: w.hostname,
    cpu: w.cpu,
    memoryBytes: w.memoryBytes,
    pidsLimit: w.pidsLimit,
    egress: w.egress ? egressFromProto(w.egress, "request") : undefined,
    exposedPorts: w.exposedPorts.length ? w.exposedPorts : undefined,
    mounts: w.mounts.length
      ? w.mounts.map((m) => defined({ source: m.source, destination: m.destination, readOnly: m.readOnly }))
      : undefined,
    timeoutMs: w.timeoutMs,
    labels: nonEmpty(w.labels),
    startupWindowMs: w.startupWindowMs,
  });
  if (w.gpu) {
    r.gpu = w.gpu.types.length ? { count: w.gpu.count, types: w.gpu.types } : { count: w.gpu.count };
    if (w.gpu.memoryMib !== undefined && w.gpu.memoryMib !== null) r.gpu.memoryMiB = w.gpu.memoryMib;
  }
  if (w.code) r.code = { sha256: w.code.sha256 };
  if (w.runner) r.runner = runnerFromProto(w.runner);
  if (w.volumes?.length) {
    r.volumes = w.volumes.map((v) => ({ workspaceId: v.workspaceId, name: v.name, mountPath: v.mountPath }));
  }
  if (w.buckets?.length) r.buckets = w.buckets.map(bucketFromWire);
  if (w.bridge) r.bridge = { workspaceId: w.bridge.workspaceId };
  // Checked by the agent (resolveRunRequest), like every other field.
  if (w.isolation !== undefined) r.isolation = w.isolation as RunContainerRequest["isolation"];
  // A proto3 optional bool keeps its presence: false (opted out) is not absent (the default).
  if (w.userNamespace !== undefined && w.userNamespace !== null) r.userNamespace = w.userNamespace;
  if (w.syscallFilter !== undefined)
    r.syscallFilter = w.syscallFilter as RunContainerRequest["syscallFilter"];
  if (w.gang) {
    const g = w.gang;
    r.gang = {
      id: g.id,
      vni: g.vni,
      rank: g.rank,
      size: g.size,
      hosts: [...g.hosts],
      subnet: g.subnet,
      masterPort: g.masterPort,
    };
  }
  return r;
}

export function containerToProto(c: ContainerStatus): WireContainer {
  const state = STATE_TO_WIRE[c.state];
  if (!state) throw new BerthError("internal", `container ${c.id} has an unknown state ${c.state}`);
  const reason = c.reason === undefined ? "EXIT_REASON_UNSPECIFIED" : REASON_TO_WIRE[c.reason];
  if (!reason) throw new BerthError("internal", `container ${c.id} has an unknown exit reason ${c.reason}`);
  const ms = (v: number | undefined, f: string) =>
    v === undefined ? undefined : uint(Math.floor(v), f, "internal");
  return defined<WireContainer>({
    id: c.id,
    image: c.image,
    imageDigest: c.imageDigest,
    state,
    pid: uint(c.pid, "pid", "internal", UINT32),
    createdAt: uint(Math.floor(c.createdAt), "createdAt", "internal"),
    startedAt: ms(c.startedAt, "startedAt"),
    exitedAt: ms(c.exitedAt, "exitedAt"),
    exitCode: c.exitCode === undefined ? undefined : int32(c.exitCode, "exitCode", "internal"),
    reason,
    labels: { ...c.labels },
    cpu: finiteNonNegative(c.cpu, "cpu", "internal"),
    memoryBytes: uint(c.memoryBytes, "memoryBytes", "internal"),
    gpus: [...c.gpus],
    gpuMemoryMib:
      c.gpuMemoryMiB === undefined ? undefined : uint(c.gpuMemoryMiB, "gpuMemoryMiB", "internal", UINT32),
    ipv4: c.ipv4,
    ipv6: c.ipv6,
    egress: egressToProto(c.egress),
    exposedPorts: c.exposedPorts.map((p, i) => uint(p, `exposedPorts[${i}]`, "internal", 65535)),
  });
}

export function containerFromProto(w: WireContainer): ContainerStatus {
  const state = STATE_FROM_WIRE.get(w.state);
  if (!state) throw bad("reply", `container ${w.id} has state ${w.state}`);
  let reason: ExitReason | undefined;
  if (w.reason !== "EXIT_REASON_UNSPECIFIED") {
    reason = REASON_FROM_WIRE.get(w.reason);
    if (!reason) throw bad("reply", `container ${w.id} has exit reason ${w.reason}`);
  }
  if (!w.egress) throw bad("reply", `container ${w.id} has no egress policy`);
  return defined<ContainerStatus>({
    id: w.id,
    image: w.image,
    imageDigest: w.imageDigest,
    state,
    pid: w.pid,
    createdAt: w.createdAt,
    startedAt: w.startedAt,
    exitedAt: w.exitedAt,
    exitCode: w.exitCode,
    reason,
    labels: { ...w.labels },
    cpu: w.cpu,
    memoryBytes: w.memoryBytes,
    gpus: [...w.gpus],
    gpuMemoryMiB: w.gpuMemoryMib ?? undefined,
    ipv4: w.ipv4,
    ipv6: w.ipv6,
    egress: egressFromProto(w.egress, "reply"),
    exposedPorts: [...w.exposedPorts],
  });
}

export function logEntryToProto(e: LogEntry): WireLogEntry {
  if (e.stream !== "stdout" && e.stream !== "stderr") {
    throw new BerthError("internal", `log entry of ${e.containerId} has stream ${e.stream}`);
  }
  return {
    containerId: e.containerId,
    stream: e.stream === "stdout" ? "LOG_STREAM_STDOUT" : "LOG_STREAM_STDERR",
    line: e.line,
    ts: uint(Math.floor(e.ts), "ts", "internal"),
  };
}

export function logEntryFromProto(w: WireLogEntry): LogEntry {
  const stream =
    w.stream === "LOG_STREAM_STDOUT" ? "stdout" : w.stream === "LOG_STREAM_STDERR" ? "stderr" : null;
  if (!stream) throw bad("reply", `log entry has stream ${w.stream}`);
  return { containerId: w.containerId, stream, line: w.line, ts: w.ts };
}

export function execRequestToProto(r: ExecRequest): WireExecRequest {
  return defined<WireExecRequest>({
    args: [...r.args],
    env: { ...r.env },
    cwd: r.cwd,
    user: r.user,
    tty: r.tty,
  });
}

export function execRequestFromProto(w: WireExecRequest | null | undefined): ExecRequest {
  if (!w) throw bad("request", "exec start has no request");
  return defined<ExecRequest>({ args: w.args, env: nonEmpty(w.env), cwd: w.cwd, user: w.user, tty: w.tty });
}

export function imageToProto(i: ImageSummary): WireImage {
  return {
    ref: i.ref,
    refs: [...i.refs],
    digest: i.digest,
    sizeBytes: uint(i.sizeBytes, "sizeBytes", "internal"),
    pulledAt: i.pulledAt,
    inUse: i.inUse,
  };
}

export function imageFromProto(w: WireImage): ImageSummary {
  return {
    ref: w.ref,
    refs: [...w.refs],
    digest: w.digest,
    sizeBytes: w.sizeBytes,
    pulledAt: w.pulledAt,
    inUse: w.inUse,
  };
}

export function credentialsFromProto(
  w: WireCredentials | null | undefined,
): { username: string; password: string } | undefined {
  return w ? { username: w.username, password: w.password } : undefined;
}
