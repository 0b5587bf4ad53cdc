import { availableParallelism, totalmem } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { invalid } from "../../shared/errors.ts";
import type { GpuReport } from "../../shared/fleet.ts";
import type { GpuInjection } from "../capacity/index.ts";
import { type ClusterPusher, checkMicromambaBin } from "../build/index.ts";
import type { ImageInfo, PullOptions, RemoveResult } from "../images/index.ts";
import type { ContainerNetwork, RecoverReport, ReservedNetwork } from "../network/index.ts";
import type { ContainerStatus, ExitReason, GangMember, LogEntry, RunnerConfig } from "../../api/index.ts";
import type {
  Assignment,
  ContainerEvent,
  ContainerInfo,
  ContainerSpec,
  ExecTarget,
  IdMap,
  LogLine,
} from "../runtime/index.ts";
import type { HostResources } from "./allocations.ts";
import type { EgressPolicy } from "../../shared/egress.ts";

// The slices of the other agent subsystems the host uses. ImageStore,
// Network, ContainerRuntime and GpuInjector satisfy them as they are.

export interface HostImages {
  pull(ref?: string, opts?: PullOptions): Promise<ImageInfo>;
  markInUse(digest: string, holder: string): void;
  release(digest: string, holder: string): void;
  list(): ImageInfo[];
  remove(refOrDigest: string): Promise<RemoveResult>;
  /** Pushes a built image to the cluster registry (ImageStore.pushToCluster); absent: builds cannot be pushed. */
  pushToCluster?: ClusterPusher["pushToCluster"];
}

export interface HostNetwork {
  /** With `reserved`: binds a namespace reserve() handed out (a pre-warmed runner's) to this container. */
  attach(containerId: string, policy: EgressPolicy, reserved?: ReservedNetwork): Promise<ContainerNetwork>;
  /** A namespace for a container whose owner is not known yet; absent: no pre-warmed runners. */
  reserve?(): Promise<ReservedNetwork>;
  unreserve?(reserved: ReservedNetwork): Promise<void>;
  /**
   * Joins an attached container to its gang's network (agent/network/gang.ts);
   * detach() takes it out. Absent: this host runs no gang members.
   */
  joinGang?(containerId: string, member: GangMember): Promise<void>;
  detach(containerId: string): Promise<void>;
  setPolicy(containerId: string, policy: EgressPolicy): Promise<ContainerNetwork>;
  allowInbound(containerId: string, port: number): Promise<void>;
  recover(liveContainerIds: Iterable<string>): Promise<RecoverReport>;
}

export interface HostRuntime {
  readonly options: { runc: string; runcRoot: string };
  /** How to start a process in a container (its OCI runtime's CLI, its root on the host). */
  execTarget(id: string): ExecTarget;
  run(spec: ContainerSpec): Promise<ContainerInfo>;
  stop(id: string, opts?: { graceMs?: number }): Promise<ContainerInfo>;
  delete(id: string): Promise<void>;
  list(): ContainerInfo[];
  get(id: string): ContainerInfo | undefined;
  recover(): Promise<ContainerInfo[]>;
  logFiles(id: string): { stdout: string; stderr: string };
  /** Ends a container's spec.startupCpu boost (ContainerRuntime.endStartupCpu). */
  endStartupCpu?(id: string): void;
  /** Mounts a code tree at a running container's spec.codeSlot (ContainerRuntime.mountCode). */
  mountCode?(id: string, lowerDir: string): Promise<void>;
  /** Gives a running pre-warmed container its stub's id and limits (ContainerRuntime.assign). */
  assign?(fromId: string, toId: string, a: Assignment, o?: { limited?: boolean }): Promise<ContainerInfo>;
  /** The cgroup limits assign() would give, given now, under the container's current id (ContainerRuntime.limit). */
  limit?(id: string, a: Assignment): Promise<void>;
  /**
   * Picks the id range a user-namespaced container `id` will run with, before
   * run() (ContainerRuntime.reserveIdMap): what is mounted for it ahead (cloud
   * buckets) must be owned by its root as the host sees it.
   */
  reserveIdMap?(id: string): IdMap;
  /** Frees a range reserved for a container that will not run after all. */
  releaseIdMap?(id: string): void;
  close(): void;
}

export interface HostGpuInjector {
  /** `sharedMemoryMiB`: the container's share of the one shared GPU in `devices` (docs/gpus.md, "Shared GPUs"). */
  inject(
    devices: readonly import("../../shared/fleet.ts").GpuDevice[],
    opts?: { sharedMemoryMiB?: number },
  ): Promise<GpuInjection>;
}

/**
 * The task side of runner containers (agent/tasks): one bridge server per
 * runner container on its socket, and what happens to its task when it exits.
 */
export interface HostRunners {
  /** Throws (a BerthError) when runner containers cannot run on this agent now. */
  check(): void;
  /**
   * Serves the bridge for `containerId` on `socketPath` (recreated when it
   * exists); `onFirstAsk` is called once, when the runner first asks for a task;
   * `gangRank`: the container is that rank of a gang (its crash names it).
   */
  open(
    containerId: string,
    runner: RunnerConfig,
    socketPath: string,
    onFirstAsk?: () => void,
    gangRank?: number,
  ): Promise<void>;
  /**
   * Serves the workspace bridge (outputs and state, no tasks) of a container
   * that is not a runner on `socketPath`, for `workspaceId`.
   */
  openWorkspace?(containerId: string, workspaceId: string, socketPath: string): Promise<void>;
  /** Stops serving it; its in-flight tasks are left to exited() or JetStream's redelivery. */
  close(containerId: string): Promise<void>;
  /** The container ended (why, when the runtime knows: oom_killed, ...): a task it held is retried or failed. */
  exited(containerId: string, exitCode: number | undefined, reason?: ExitReason, memoryBytes?: number): void;
}

/** The repository's Python SDK (sdk/python, which holds `berth/`). */
export const DEFAULT_SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));

/** The runtime's callbacks, handed to the factory that builds it. */
export interface RuntimeHooks {
  onEvent: (e: ContainerEvent) => void;
  onLog: (l: LogLine) => void;
}

/** A container started or ended; `status` is what getContainer would answer right after. */
export type HostEvent =
  | { type: "start"; containerId: string; at: number; status: ContainerStatus }
  | { type: "exit"; containerId: string; at: number; status: ContainerStatus; stderrTail: string };

/** pino-compatible. */
export interface HostLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface ContainerHostOptions {
  /** Directory the host owns: one `<id>.json` record per container, hosts files, exec scratch. */
  root: string;
  images: HostImages;
  network: HostNetwork;
  /**
   * Builds the container runtime with the host's handlers wired in (the host
   * frees resources on exits it reports), e.g.
   * `(hooks) => new ContainerRuntime({ root, ...hooks })`.
   */
  runtime: (hooks: RuntimeHooks) => HostRuntime;
  /** The host's current GPU report (e.g. `() => watcher.current`). @default no GPUs */
  gpus?: () => GpuReport | undefined | Promise<GpuReport | undefined>;
  /** Needed only to run containers that ask for GPUs. */
  gpuInjector?: HostGpuInjector;
  /** What containers may be given in total. @default this machine's cores and memory (node:os) */
  capacity?: HostResources | (() => HostResources | Promise<HostResources>);
  /**
   * How many times the cores may be handed out. CFS quotas cap each
   * container at its own share either way; above 1, busy containers slow
   * each other down. Memory is never overcommitted (a hard limit). @default 1
   */
  cpuOvercommit?: number;
  /** Host directories under which request mounts may lie (symlinks resolved). @default [] (no mounts) */
  allowedMountRoots?: string[];
  /** Where workspace volumes live (docs/volumes.md); requests with volumes fail without one. */
  volumeRoot?: string;
  /** The operator's micromamba binary, for build steps on images without one (docs/images.md, "micromamba"). */
  micromambaBin?: string;
  logger?: HostLogger;
  onEvent?: (e: HostEvent) => void;
  onLog?: (l: LogEntry) => void;
  /** Grace for stopContainer when the caller gives none. @default 10_000 */
  defaultGraceMs?: number;
  /** Unpacked code archives (CodeStore). @default root/code */
  codeDir?: string;
  /** Per-runner-container bridge directories (`<dir>/<id>/agent.sock`). @default root/bridge */
  bridgeDir?: string;
  /** The Python SDK mounted into runner containers. @default DEFAULT_SDK_DIR */
  sdkDir?: string;
  /** Needed only to run runner containers (requests with `runner`). */
  runners?: HostRunners;
  /**
   * The CPU cap (cores) of a runner container until its runner first asks for
   * a task, or runnerStartupMs has passed: Python's start-up and imports take
   * tens of ms of CPU, which a small quota (0.25 cores) stretches 4x. The
   * container's CFS share stays its own cpu, so the boost uses idle cores
   * only. A container asking for more keeps its own. 0 = no boost. @default 1
   */
  runnerStartupCpu?: number;
  /** The longest a runner's start-up boost lasts. @default 5_000 */
  runnerStartupMs?: number;
  /**
   * Runner containers kept started ahead of demand, Python and berth
   * imported, for cold starts of functions (docs/runtime.md, "Pre-warmed
   * runners"). 0 keeps none. @default 0
   */
  warmRunners?: number;
  /** The image of the pre-warmed runners. @default the image store's default image */
  warmRunnerImage?: string;
  /**
   * Sandbox containers of the default image kept started ahead of demand,
   * their process server waiting for a sandbox (docs/sandboxes.md,
   * "Pre-warmed sandboxes"). 0 keeps none. @default 0
   */
  warmSandboxes?: number;
}

/** More would be memory held for nothing: each waits with its interpreter loaded (~20 MB). */
export const MAX_WARM_RUNNERS = 64;

export interface ResolvedContainerHostOptions {
  root: string;
  images: HostImages;
  network: HostNetwork;
  runtime: (hooks: RuntimeHooks) => HostRuntime;
  gpus: () => GpuReport | undefined | Promise<GpuReport | undefined>;
  gpuInjector: HostGpuInjector | undefined;
  capacity: () => Promise<HostResources>;
  cpuOvercommit: number;
  allowedMountRoots: string[];
  volumeRoot: string | undefined;
  micromambaBin: string | undefined;
  logger: HostLogger;
  onEvent: (e: HostEvent) => void;
  onLog: (l: LogEntry) => void;
  defaultGraceMs: number;
  codeDir: string;
  bridgeDir: string;
  sdkDir: string;
  runners: HostRunners | undefined;
  runnerStartupCpu: number;
  runnerStartupMs: number;
  warmRunners: number;
  warmRunnerImage: string | undefined;
  warmSandboxes: number;
}

const silent: HostLogger = { info() {}, warn() {}, error() {} };

function checkResources(r: HostResources): HostResources {
  if (!(r.cpuCores > 0) || !(r.memoryBytes > 0)) {
    throw invalid(
      `container host: capacity must have cpuCores > 0 and memoryBytes > 0, got ${JSON.stringify(r)}`,
    );
  }
  return { cpuCores: r.cpuCores, memoryBytes: r.memoryBytes };
}

export function resolveContainerHostOptions(o: ContainerHostOptions): ResolvedContainerHostOptions {
  if (!o.root || !isAbsolute(resolve(o.root))) throw invalid("container host: root is required");
  for (const [name, v] of [
    ["images", o.images],
    ["network", o.network],
    ["runtime", o.runtime],
  ] as const) {
    if (!v) throw invalid(`container host: ${name} is required`);
  }
  const cpuOvercommit = o.cpuOvercommit ?? 1;
  if (!(cpuOvercommit >= 1) || !Number.isFinite(cpuOvercommit)) {
    throw invalid(`container host: cpuOvercommit must be a number >= 1, got ${cpuOvercommit}`);
  }
  const roots = o.allowedMountRoots ?? [];
  for (const r of roots) {
    if (typeof r !== "string" || !isAbsolute(r)) {
      throw invalid(
        `container host: allowedMountRoots entries must be absolute paths, got ${JSON.stringify(r)}`,
      );
    }
  }
  if (o.volumeRoot !== undefined && (typeof o.volumeRoot !== "string" || !isAbsolute(o.volumeRoot))) {
    throw invalid(`container host: volumeRoot must be an absolute path, got ${JSON.stringify(o.volumeRoot)}`);
  }
  const cap = o.capacity ?? { cpuCores: availableParallelism(), memoryBytes: totalmem() };
  const capacity =
    typeof cap === "function"
      ? async () => checkResources(await cap())
      : (() => {
          const fixed = checkResources(cap);
          return async () => fixed;
        })();
  const defaultGraceMs = o.defaultGraceMs ?? 10_000;
  if (!Number.isInteger(defaultGraceMs) || defaultGraceMs < 0) {
    throw invalid(`container host: defaultGraceMs must be an integer >= 0, got ${defaultGraceMs}`);
  }
  const runnerStartupCpu = o.runnerStartupCpu ?? 1;
  if (!(runnerStartupCpu >= 0) || !Number.isFinite(runnerStartupCpu)) {
    throw invalid(`container host: runnerStartupCpu must be a number >= 0, got ${runnerStartupCpu}`);
  }
  const runnerStartupMs = o.runnerStartupMs ?? 5_000;
  if (!Number.isInteger(runnerStartupMs) || runnerStartupMs < 0) {
    throw invalid(`container host: runnerStartupMs must be an integer >= 0, got ${runnerStartupMs}`);
  }
  const [warmRunners, warmSandboxes] = (["warmRunners", "warmSandboxes"] as const).map((k) => {
    const n = o[k] ?? 0;
    if (!Number.isInteger(n) || n < 0 || n > MAX_WARM_RUNNERS)
      throw invalid(`container host: ${k} must be an integer 0..${MAX_WARM_RUNNERS}, got ${n}`);
    return n;
  }) as [number, number];
  const root = resolve(o.root);
  return {
    warmRunners,
    warmRunnerImage: o.warmRunnerImage,
    warmSandboxes,
    root,
    images: o.images,
    network: o.network,
    runtime: o.runtime,
    gpus: o.gpus ?? (() => undefined),
    gpuInjector: o.gpuInjector,
    capacity,
    cpuOvercommit,
    allowedMountRoots: [...roots],
    volumeRoot: o.volumeRoot === undefined ? undefined : resolve(o.volumeRoot),
    micromambaBin: o.micromambaBin === undefined ? undefined : checkMicromambaBin(o.micromambaBin),
    logger: o.logger ?? silent,
    onEvent: o.onEvent ?? (() => {}),
    onLog: o.onLog ?? (() => {}),
    defaultGraceMs,
    codeDir: resolve(o.codeDir ?? join(root, "code")),
    bridgeDir: resolve(o.bridgeDir ?? join(root, "bridge")),
    sdkDir: resolve(o.sdkDir ?? DEFAULT_SDK_DIR),
    runners: o.runners,
    runnerStartupCpu,
    runnerStartupMs,
  };
}
