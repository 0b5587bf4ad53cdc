// What SandboxService depends on, as small interfaces: the composition root
// wires the real services, logic tests feed fakes.

import type { Logger } from "pino";
import type { ContainerApi } from "../../api/index.ts";
import type { ContainerFilesApi, ContainerSnapshotApi, SandboxProcessApi } from "../../api/index.ts";
import type {
  CodeSource,
  ContainerEventSource,
  ManagedContainerInfo,
  SecretResolver,
  StubSource,
  WorkspaceRuntime,
} from "../containers/index.ts";
import type { FleetView } from "../fleet/index.ts";
import { Planner } from "../scheduler/index.ts";
import type { ContainerLimits } from "../scheduler/index.ts";
import type { SandboxKind, SandboxRepo } from "./store.ts";

/** One agent as sandboxes use it: containers (exposePort included), files inside them, snapshots, processes. */
export type SandboxAgentApi = ContainerApi & ContainerFilesApi & ContainerSnapshotApi & SandboxProcessApi;

export interface SandboxAgents {
  client(agentId: string): SandboxAgentApi;
}

/** A workspace's container limits, and how its operator set every container of it to run. */
export type SandboxLimits = ContainerLimits & WorkspaceRuntime;

export interface SandboxServiceOptions {
  repo: SandboxRepo;
  stubs: StubSource;
  fleet: FleetView;
  agents: SandboxAgents;
  /** The coordinator's code archives (pushed to the agent like a runner's). */
  code: CodeSource;
  /** Resolves `extra.secrets`. @default none: a stub naming secrets cannot start */
  secrets?: SecretResolver;
  /** Container exits from every agent (natsContainerEvents): an ended container ends its sandbox. @default none */
  events?: ContainerEventSource;
  /** The URL clients reach this coordinator at: exposed-port URLs start with it. */
  publicUrl: string;
  /** `{container_id}-{port}.{endpointDomain}` port URLs instead of path ones. @default none */
  endpointDomain?: string;
  /**
   * The one planner (coordinator/scheduler/planner.ts) holding every
   * container's reservation, runner containers included: sandboxes and pods
   * are placed through it (idle warm runners stopped to make room) and
   * count in its workspace usage. @default a planner of its own over `fleet`
   */
  planner?: Planner;
  /**
   * How long a create waits for room when nothing fits and no idle warm
   * container can be stopped for it, before it fails with
   * resource_exhausted and the reason; 0 refuses at once.
   * @default 30000
   */
  placementWaitMs?: number;
  /** Called when a create starts waiting for room, and when its reason changes (the coordinator emits `sandbox.waiting`). @default none */
  onWaiting?: (info: {
    workspaceId: string;
    stubId: string;
    kind: SandboxKind;
    reason: string;
    waitMs: number;
  }) => void;
  /**
   * The workspace's limits (docs/limits.md): a sandbox or pod past one is
   * refused with limit_exceeded unless idle warm containers of the
   * workspace can be stopped for it. @default none: no limits
   */
  limits?: (workspaceId: string) => Promise<SandboxLimits>;
  /** The workspace's GPU-hours and CPU-hours of the month (docs/limits.md; ComputeBudgets.check): a create past one is refused. @default none */
  budgets?: (workspaceId: string, work: { gpus: boolean }) => Promise<void>;
  log: Logger;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
  /** A sandbox's idle lifetime when its stub sets none. @default 600 */
  defaultTtlSeconds?: number;
  /** How often expired sandboxes are looked for and agents' sandbox containers reconciled. @default 15000 */
  sweepIntervalMs?: number;
  /** last_active_at is written at most this often per sandbox. @default 5000 */
  touchEveryMs?: number;
  /** SIGTERM grace when a sandbox or pod is stopped. @default 5000 */
  stopGraceMs?: number;
  /**
   * A labelled sandbox container with no record (its start was cut short) is
   * removed once it is this old. @default 120000
   */
  orphanGraceMs?: number;
  /**
   * A sandbox whose agent is lost or has left (or, after a coordinator start,
   * was never heard from) for longer than this ends: nothing can reach its
   * container (docs/reliability.md, "Stuck work: sandboxes"). The same bound
   * as a task's on a lost agent. @default 60000
   */
  lostAgentAfterMs?: number;
  /**
   * A pod create answers once its entrypoint has stayed up this long; one that
   * exits sooner (a program that crashes at once) fails the create with its
   * exit code and last output. 0 skips the check. @default 2000
   */
  podSettleMs?: number;
}

export interface ResolvedSandboxServiceOptions
  extends Required<
    Omit<SandboxServiceOptions, "secrets" | "events" | "endpointDomain" | "limits" | "budgets" | "onWaiting">
  > {
  secrets: SecretResolver | undefined;
  events: ContainerEventSource | undefined;
  endpointDomain: string | undefined;
  limits: ((workspaceId: string) => Promise<SandboxLimits>) | undefined;
  budgets: SandboxServiceOptions["budgets"];
  onWaiting: SandboxServiceOptions["onWaiting"];
}

function waitMs(v: number): number {
  if (!Number.isFinite(v) || v < 0 || v > 600_000)
    throw new Error(`sandbox service: placementWaitMs must be within 0..600000, got ${v}`);
  return v;
}

function settleMs(v: number): number {
  if (!Number.isFinite(v) || v < 0 || v > 60_000)
    throw new Error(`sandbox service: podSettleMs must be within 0..60000, got ${v}`);
  return v;
}

export function resolveSandboxServiceOptions(o: SandboxServiceOptions): ResolvedSandboxServiceOptions {
  const positive = (name: string, v: number) => {
    if (!Number.isFinite(v) || v <= 0)
      throw new Error(`sandbox service: ${name} must be a positive number, got ${v}`);
    return v;
  };
  const ttl = o.defaultTtlSeconds ?? 600;
  if (!Number.isInteger(ttl) || (ttl !== -1 && ttl < 1))
    throw new Error(`sandbox service: defaultTtlSeconds must be -1 or a whole number >= 1, got ${ttl}`);
  return {
    ...o,
    publicUrl: o.publicUrl.replace(/\/+$/, ""),
    secrets: o.secrets,
    events: o.events,
    endpointDomain: o.endpointDomain,
    planner: o.planner ?? new Planner({ fleet: o.fleet }),
    placementWaitMs: waitMs(o.placementWaitMs ?? 30_000),
    onWaiting: o.onWaiting,
    limits: o.limits,
    budgets: o.budgets,
    clock: o.clock ?? Date.now,
    defaultTtlSeconds: ttl,
    sweepIntervalMs: positive("sweepIntervalMs", o.sweepIntervalMs ?? 15_000),
    touchEveryMs: positive("touchEveryMs", o.touchEveryMs ?? 5000),
    stopGraceMs: o.stopGraceMs ?? 5000,
    orphanGraceMs: positive("orphanGraceMs", o.orphanGraceMs ?? 120_000),
    lostAgentAfterMs: positive("lostAgentAfterMs", o.lostAgentAfterMs ?? 60_000),
    podSettleMs: settleMs(o.podSettleMs ?? 2000),
  };
}

/** A sandbox or pod container as the workspace's container list shows it (GET /api/v1/container/{ws}). */
export interface SandboxContainerInfo extends ManagedContainerInfo {
  kind: "sandbox" | "pod";
}

/** A sandbox or pod as the routes answer it. */
export interface SandboxView {
  sandboxId: string;
  stubId: string;
  kind: "sandbox" | "pod";
  agentId: string;
  /** starting only while POST /sandboxes has not answered yet. */
  status: "starting" | "running" | "terminated";
  createdAt: string;
  expiresAt: string | null;
  ttlSeconds: number;
  /** Exposed ports in the order they were given. */
  ports: number[];
  urls: Record<string, string>;
  network: { block_network: boolean; allow_list: string[] | null };
  terminatedAt: string | null;
  terminatedReason: string | null;
  /** Its container's exit code once it ended on its own (a finished pod: 0); null otherwise. */
  exitCode: number | null;
}
