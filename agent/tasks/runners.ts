// Runner containers as the container host sees them (HostRunners): a bridge
// server on each one's socket, and the TaskWorker behind all of them once
// the agent has NATS. Bridges open before NATS is there (an agent restart
// re-serves its live runners at once); they answer 503 until it is.

import type { NatsConnection } from "nats";
import { BerthError } from "../../shared/errors.ts";
import { BridgeServer } from "../bridge/server.ts";
import type { DatabaseDialer } from "../bridge/db-connect.ts";
import { StateRelayClient } from "../bridge/state-relay.ts";
import { OutputRelayClient } from "../bridge/output-relay.ts";
import type { HostRunners } from "../host/options.ts";
import type { ExitReason, RunnerConfig } from "../../api/index.ts";
import type { ContainerLimitsReader, RunnerSlotInfo, TaskWorkerLogger, TaskWorkerOptions } from "./types.ts";
import type { TaskTrace } from "./trace.ts";
import { TaskWorker } from "./worker.ts";

export interface TaskRunnersOptions {
  /** Stops and removes a container (for a timed-out or cancelled task). */
  kill: (containerId: string) => Promise<void>;
  logger?: TaskWorkerLogger;
  /** Connects containers to their workspace's databases over their bridge (agent/bridge/db-connect.ts). @default none */
  dialDatabase?: DatabaseDialer;
  /** Reads runner containers' disk and pids limits, for the disk_full and pids_exhausted reasons. @default none */
  limits?: ContainerLimitsReader;
  /** The debug trace of each task message's life on this agent (docs/tasks.md, "Batches"); flushed by stop(). @default off */
  trace?: TaskTrace;
  /** Passed to the TaskWorker (tests shorten them). */
  worker?: Pick<
    TaskWorkerOptions,
    "pullWaitMs" | "workingIntervalMs" | "cancelMemoryMs" | "startedDelayMs" | "readyHoldMs"
  >;
}

const silent: TaskWorkerLogger = { info() {}, warn() {}, error() {} };

export class TaskRunners implements HostRunners {
  private worker?: TaskWorker;
  private stateRelay?: StateRelayClient;
  private outputRelay?: OutputRelayClient;
  /** By container; a sandbox's or pod's workspace bridge has no slot (it takes no tasks). */
  private readonly bridges = new Map<string, { server: BridgeServer; slot?: RunnerSlotInfo }>();
  private readonly log: TaskWorkerLogger;

  constructor(private readonly o: TaskRunnersOptions) {
    this.log = o.logger ?? silent;
  }

  /** Starts taking tasks over `nc` as agent `agentId`. */
  async attach(nc: NatsConnection, agentId: string): Promise<void> {
    if (this.worker) throw new BerthError("conflict", "the task runners already have a NATS connection");
    const worker = new TaskWorker({
      nc,
      agentId,
      kill: this.o.kill,
      logger: this.log,
      ...(this.o.limits ? { limits: this.o.limits } : {}),
      ...(this.o.trace ? { trace: this.o.trace } : {}),
      ...this.o.worker,
    });
    await worker.start();
    this.stateRelay = new StateRelayClient(nc, agentId);
    this.outputRelay = new OutputRelayClient(nc, agentId);
    for (const b of this.bridges.values()) if (b.slot) worker.addSlot(b.slot);
    this.worker = worker;
  }

  get attached(): boolean {
    return this.worker !== undefined;
  }

  check(): void {
    if (!this.worker) {
      throw new BerthError(
        "failed_precondition",
        "runner containers need the agent's NATS connection: this agent is not joined to a coordinator, or not connected to NATS yet",
      );
    }
  }

  async open(
    containerId: string,
    runner: RunnerConfig,
    socketPath: string,
    onFirstAsk?: () => void,
    gangRank?: number,
  ): Promise<void> {
    await this.close(containerId);
    const slot: RunnerSlotInfo = {
      containerId,
      stubId: runner.stubId,
      workspaceId: runner.workspaceId,
      workers: runner.workers ?? 1,
      ...(runner.callbackUrl ? { callbackUrl: runner.callbackUrl } : {}),
      ...(onFirstAsk ? { onFirstAsk } : {}),
      ...(runner.configVersion ? { configVersion: runner.configVersion } : {}),
      ...(gangRank !== undefined ? { gangRank } : {}),
    };
    const server = new BridgeServer(
      socketPath,
      containerId,
      () => this.worker,
      this.log,
      { workspaceId: runner.workspaceId, relay: () => this.stateRelay },
      () => this.outputRelay,
      true,
      this.o.dialDatabase,
    );
    await server.listen();
    this.bridges.set(containerId, { server, slot });
    this.worker?.addSlot(slot);
  }

  async openWorkspace(containerId: string, workspaceId: string, socketPath: string): Promise<void> {
    await this.close(containerId);
    const server = new BridgeServer(
      socketPath,
      containerId,
      () => undefined,
      this.log,
      { workspaceId, relay: () => this.stateRelay },
      () => this.outputRelay,
      false,
      this.o.dialDatabase,
    );
    await server.listen();
    this.bridges.set(containerId, { server });
  }

  async close(containerId: string): Promise<void> {
    const b = this.bridges.get(containerId);
    if (!b) return;
    this.bridges.delete(containerId);
    this.worker?.removeSlot(containerId);
    await b.server.close();
  }

  /** `memoryBytes`: the container's memory limit, named in an OOM kill's error. */
  exited(containerId: string, exitCode: number | undefined, reason?: ExitReason, memoryBytes?: number): void {
    this.worker?.containerExited(containerId, exitCode, reason, memoryBytes);
  }

  /** Closes every bridge and the worker; containers keep running, their messages are redelivered later. */
  async stop(): Promise<void> {
    this.worker?.close();
    this.worker = undefined;
    this.stateRelay = undefined;
    this.outputRelay = undefined;
    const servers = [...this.bridges.values()].map((b) => b.server);
    this.bridges.clear();
    await Promise.all(servers.map((s) => s.close()));
  }
}
