// What the container manager depends on, as small interfaces, so the
// composition root wires real services and logic tests feed fakes.

import type { Logger } from "pino";
import type { ContainerApi, RunContainerRequest, SyscallFilter } from "../../api/index.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import { BerthError } from "../../shared/errors.ts";
import type { FleetView } from "../fleet/index.ts";
import { Planner } from "../scheduler/index.ts";
import type { ContainerLimits } from "../scheduler/index.ts";
import type { StubRecord as StoredStub } from "../tasks/index.ts";
import type { TaskActivity } from "../tasks/index.ts";
import { runnerRequest } from "./runner-request.ts";

/**
 * How an operator set a workspace's containers to run (docs/limits.md):
 * isolation "gvisor" whatever the stub asks; userNamespace false or
 * syscallFilter "denylist" when the workspace was opted out of either.
 */
export interface WorkspaceRuntime {
  isolation?: "gvisor" | null;
  /** false: opted out of the user namespace. @default true */
  userNamespace?: boolean;
  /** "denylist": opted out of the allow list. @default "allowlist" */
  syscallFilter?: SyscallFilter;
}

/** A workspace's container limits, and how its operator set its containers to run. */
export type WorkspaceContainerLimits = ContainerLimits & WorkspaceRuntime;

/** What the manager needs of a stored stub. */
export type StubRecord = Pick<
  StoredStub,
  "id" | "workspaceId" | "name" | "type" | "config" | "extra" | "configVersion"
> & {
  /** Only these agents hold the stub's image (a sandbox's filesystem snapshot: snapshot-images.ts). @default any */
  imageAgents?: readonly string[];
  /** Why no container of the stub can start (its snapshot image is not there); its tasks fail with it. */
  imageError?: string;
};

export interface StubSource {
  get(stubId: string): Promise<StubRecord | undefined>;
}

/** The coordinator's content-addressed objects (code archives). */
export interface CodeSource {
  /** The archive's bytes; fails with BerthError not_found when the coordinator has no such object. */
  open(sha256: string): AsyncIterable<Uint8Array>;
}

/** One ContainerApi per agent (AgentClientPool over mTLS in production). */
export interface AgentClients {
  client(agentId: string): ContainerApi;
  /** The agent left or was lost: drop its connection (a later client() dials again). */
  release?(agentId: string): void;
}

/** Container start/exit events from every agent. Returns an unsubscribe. */
export interface ContainerEventSource {
  subscribe(handler: (event: ContainerEventMessage) => void): () => void;
}

/** The values of a stub's secrets (the coordinator's SecretService). */
export interface SecretResolver {
  /** By name; fails naming every secret it cannot give. */
  resolve(workspaceId: string, names: readonly string[]): Promise<Record<string, string>>;
}

/** Deployment state of stubs (the deployment service implements it). */
export interface DeploymentStates {
  /** undefined: the stub belongs to no deployment (a function's stub): it runs on demand. */
  of(stubId: string): { active: boolean; minContainers: number } | undefined;
  /** Active deployments' stubs whose baseline is > 0 (reconciled even without demand). */
  baselines(): { stubId: string; minContainers: number }[];
}

/** A change of a stub's container target (docs/deployments.md "Autoscaling"). */
export interface ScaleEvent {
  stubId: string;
  workspaceId: string;
  /** ms since epoch. */
  at: number;
  from: number;
  to: number;
  reason: string;
  /** Tasks waiting for a container when the target changed. */
  queueDepth: number;
}

export interface StartBackoffOptions {
  /** Wait after the first failed start of a stub. @default 1000 */
  initialMs?: number;
  /** Longest wait between attempts. @default 30000 */
  maxMs?: number;
  /** @default 2 */
  factor?: number;
  /**
   * Failed rounds in a row (each round: the starts between two waits) after
   * which the stub's waiting tasks are failed with the last error, so a
   * broken image or crash-looping runner does not leave them waiting forever.
   * @default 8
   */
  maxAttempts?: number;
}

export interface ContainerManagerOptions {
  fleet: FleetView;
  /**
   * The one planner (coordinator/scheduler/planner.ts) that holds every
   * container's reservation, sandboxes and pods included: runner containers
   * are placed through it, counted in its workspace usage, and their idle
   * warm ones stopped when it makes room. @default a planner of its own over `fleet`
   */
  planner?: Planner;
  activity: TaskActivity;
  stubs: StubSource;
  /**
   * The workspace's container limits (docs/limits.md: containers, CPU,
   * memory, GPUs; null = none): a start that would exceed one waits. One of
   * workspaceLimits and workspaceLimit is needed.
   */
  workspaceLimits?(workspaceId: string): Promise<WorkspaceContainerLimits>;
  /** Only the most containers a workspace may run at once (older form of workspaceLimits). */
  workspaceLimit?(workspaceId: string): Promise<number>;
  code: CodeSource;
  agents: AgentClients;
  events: ContainerEventSource;
  /** Deployment states: baselines, stopped deployments. @default none: every stub runs on demand */
  deployments?: DeploymentStates;
  /** Called when a stub's container target changes (not on every reconcile). @default none (it is logged either way) */
  onScale?: (ev: ScaleEvent) => void;
  /** Resolves `extra.secrets` into the container's environment. @default none: a stub naming secrets cannot start */
  secrets?: SecretResolver;
  log: Logger;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
  /** @default 1000 */
  reconcileIntervalMs?: number;
  startBackoff?: StartBackoffOptions;
  /** SIGTERM grace when stopping a container. @default 10000 */
  stopGraceMs?: number;
  /**
   * A container that exits this soon after it started counts as a failed
   * start (crash loop); one that lived longer or took a task resets the count.
   * @default 30000
   */
  healthyAfterMs?: number;
  /** How long a stub's config is cached between lookups. @default 5000 */
  stubCacheMs?: number;
  /** Whether stop() stops the containers this manager runs. @default true */
  stopContainersOnStop?: boolean;
  /**
   * What RunContainer gets for one container of a stub (the id, labels and
   * resources must stay). @default runnerRequest: a runner container
   */
  containerRequest?: (
    stub: StubRecord,
    containerId: string,
    gpuType: string | undefined,
    /** The stub's resolved secrets, for the container's environment. */
    secretEnv?: Record<string, string>,
  ) => RunContainerRequest;
}

export interface ResolvedContainerManagerOptions
  extends Required<
    Omit<
      ContainerManagerOptions,
      "startBackoff" | "deployments" | "onScale" | "workspaceLimit" | "workspaceLimits"
    >
  > {
  workspaceLimits(workspaceId: string): Promise<WorkspaceContainerLimits>;
  startBackoff: Required<StartBackoffOptions>;
  deployments: DeploymentStates | undefined;
  onScale: ((ev: ScaleEvent) => void) | undefined;
}

const noSecretStore: SecretResolver = {
  async resolve(_ws, names) {
    if (names.length === 0) return {};
    throw new BerthError(
      "failed_precondition",
      `the stub needs secrets ${names.join(", ")} but this coordinator has no secret store`,
    );
  },
};

export function resolveContainerManagerOptions(o: ContainerManagerOptions): ResolvedContainerManagerOptions {
  const positive = (name: string, v: number) => {
    if (!Number.isFinite(v) || v <= 0)
      throw new Error(`container manager: ${name} must be a positive number, got ${v}`);
    return v;
  };
  const b = o.startBackoff ?? {};
  const { workspaceLimit, workspaceLimits, ...rest } = o;
  if (!workspaceLimits && !workspaceLimit)
    throw new Error("container manager: workspaceLimits (or workspaceLimit) is required");
  return {
    ...rest,
    workspaceLimits:
      workspaceLimits ??
      (async (ws) => ({
        maxContainers: await (workspaceLimit as (ws: string) => Promise<number>)(ws),
        maxCpuMillicores: null,
        maxMemoryMb: null,
        maxGpus: null,
      })),
    clock: o.clock ?? Date.now,
    reconcileIntervalMs: positive("reconcileIntervalMs", o.reconcileIntervalMs ?? 1000),
    stopGraceMs: o.stopGraceMs ?? 10_000,
    healthyAfterMs: o.healthyAfterMs ?? 30_000,
    stubCacheMs: o.stubCacheMs ?? 5000,
    stopContainersOnStop: o.stopContainersOnStop ?? true,
    planner: o.planner ?? new Planner({ fleet: o.fleet }),
    containerRequest: o.containerRequest ?? runnerRequest,
    secrets: o.secrets ?? noSecretStore,
    deployments: o.deployments,
    onScale: o.onScale,
    startBackoff: {
      initialMs: positive("startBackoff.initialMs", b.initialMs ?? 1000),
      maxMs: positive("startBackoff.maxMs", b.maxMs ?? 30_000),
      factor: positive("startBackoff.factor", b.factor ?? 2),
      maxAttempts: positive("startBackoff.maxAttempts", b.maxAttempts ?? 8),
    },
  };
}

/** A container the manager placed (or found on an agent at start), as tests and stats see it. */
export interface ManagedContainerInfo {
  id: string;
  stubId: string;
  workspaceId: string;
  agentId: string;
  state: "starting" | "running" | "stopping";
  /** ms since epoch: when it was placed, then when it was running. */
  since: number;
}
