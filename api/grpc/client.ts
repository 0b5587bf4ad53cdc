// AgentApi and ContainerApi over gRPC: to a local agent through its unix
// socket, or to a remote one over TCP with mutual TLS. Every unary call has a
// deadline; failures arrive as BerthErrors (see errors.ts).

import * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import type { HostCapacity } from "../../shared/fleet.ts";
import type { AgentApi, AgentHealth } from "../agent.ts";
import type {
  ContainerApi,
  ContainerStatus,
  ExecRequest,
  ImageGcResult,
  ImageSummary,
  ImportImageRequest,
  LogEntry,
  RunContainerRequest,
} from "../containers.ts";
import { ContainerRpcClient, type RpcChannel, unaryCall } from "./container-client.ts";
import {
  type WireCapacity,
  type WireHealthResponse,
  capacityFromProto,
  healthFromProto,
} from "./agent-convert.ts";
import type { RpcExecSession } from "./exec-client.ts";
import { loadAgentProto } from "./proto.ts";
import type { ContainerFilesApi, FileInfo, FileSearchMatch, ReplaceResult } from "../files.ts";
import type { ContainerSnapshotApi } from "../snapshots.ts";
import { SandboxRpcClient } from "./sandbox-client.ts";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../builds.ts";
import { buildEventFromProto, buildRequestToProto, type WireBuildEvent } from "./build-convert.ts";
import { streamCall } from "./container-client.ts";
import type { SandboxProcessApi } from "../processes.ts";
import { ProcessDelegation } from "../process-delegation.ts";
import { ProcessRpcClient } from "./process-client.ts";

export interface AgentRpcClientTlsOptions {
  /** The cluster CA the agent's server certificate must chain to. */
  caPem: string;
  /** This client's certificate and key, issued by the cluster CA. */
  certPem: string;
  keyPem: string;
  /**
   * Name to check the server certificate against instead of the host in
   * `address` (agents are often dialled by IP but named by agent id).
   * @default the host part of address
   */
  serverNameOverride?: string;
}

export interface AgentRpcClientOptions {
  /** `unix:///path/to/agent.sock`, or `host:port` (`[v6]:port`) for mTLS over TCP. */
  address: string;
  /** Required for a TCP address; not allowed with a unix socket. */
  tls?: AgentRpcClientTlsOptions;
  /**
   * Deadline of each call.
   * @default 10000
   */
  deadlineMs?: number;
  /**
   * Deadline of the calls that may pull an image or wait out a stop's grace
   * period (RunContainer, PullImage, StopContainer, RemoveImage, ImportImage, GcImages).
   * @default 1800000 (30 minutes)
   */
  longDeadlineMs?: number;
}

export interface ResolvedAgentRpcClientOptions {
  address: string;
  transport: "unix" | "tls";
  tls?: AgentRpcClientTlsOptions;
  deadlineMs: number;
  longDeadlineMs: number;
}

export function resolveAgentRpcClientOptions(o: AgentRpcClientOptions): ResolvedAgentRpcClientOptions {
  if (typeof o.address !== "string" || o.address === "") {
    throw new BerthError("invalid_request", "agent client: address is required (unix:///path or host:port)");
  }
  const deadlineMs = o.deadlineMs ?? 10_000;
  if (!Number.isInteger(deadlineMs) || deadlineMs <= 0) {
    throw new BerthError(
      "invalid_request",
      `agent client: deadlineMs must be a positive integer, got ${deadlineMs}`,
    );
  }
  const longDeadlineMs = o.longDeadlineMs ?? 30 * 60_000;
  if (!Number.isInteger(longDeadlineMs) || longDeadlineMs <= 0) {
    throw new BerthError(
      "invalid_request",
      `agent client: longDeadlineMs must be a positive integer, got ${longDeadlineMs}`,
    );
  }
  if (o.address.startsWith("unix:")) {
    if (!o.address.startsWith("unix:///")) {
      throw new BerthError(
        "invalid_request",
        `agent client: a unix address needs an absolute path: unix:///path, got ${o.address}`,
      );
    }
    if (o.tls)
      throw new BerthError("invalid_request", "agent client: tls is not used on a unix socket; drop it");
    return { address: o.address, transport: "unix", deadlineMs, longDeadlineMs };
  }
  if (!/^(\[[0-9a-fA-F:.]+\]|[^:/\s]+):\d{1,5}$/.test(o.address)) {
    throw new BerthError(
      "invalid_request",
      `agent client: address must be unix:///path or host:port, got ${o.address}`,
    );
  }
  if (!o.tls?.caPem || !o.tls.certPem || !o.tls.keyPem) {
    throw new BerthError(
      "invalid_request",
      `agent client: ${o.address} is TCP, which needs tls.caPem, tls.certPem and tls.keyPem`,
    );
  }
  return { address: o.address, transport: "tls", tls: o.tls, deadlineMs, longDeadlineMs };
}

export class AgentRpcClient
  extends ProcessDelegation
  implements AgentApi, ContainerApi, ContainerFilesApi, ContainerSnapshotApi, SandboxProcessApi, ImageBuildApi
{
  readonly options: ResolvedAgentRpcClientOptions;
  private readonly client: grpc.Client;
  private readonly channel: RpcChannel;
  private readonly containers: ContainerRpcClient;
  private readonly sandboxes: SandboxRpcClient;
  protected readonly processes: ProcessRpcClient;

  constructor(options: AgentRpcClientOptions) {
    super();
    this.options = resolveAgentRpcClientOptions(options);
    const { Client } = loadAgentProto();
    const channelOptions: grpc.ChannelOptions = {};
    let creds: grpc.ChannelCredentials;
    if (this.options.tls) {
      const t = this.options.tls;
      creds = grpc.credentials.createSsl(Buffer.from(t.caPem), Buffer.from(t.keyPem), Buffer.from(t.certPem));
      if (t.serverNameOverride) {
        channelOptions["grpc.ssl_target_name_override"] = t.serverNameOverride;
        channelOptions["grpc.default_authority"] = t.serverNameOverride;
      }
    } else {
      creds = grpc.credentials.createInsecure();
    }
    this.client = new Client(this.options.address, creds, channelOptions);
    const { address, deadlineMs, longDeadlineMs } = this.options;
    this.channel = { client: this.client, address, deadlineMs, longDeadlineMs };
    this.containers = new ContainerRpcClient(this.channel);
    this.sandboxes = new SandboxRpcClient(this.channel);
    this.processes = new ProcessRpcClient(this.channel);
  }

  async health(): Promise<AgentHealth> {
    return healthFromProto((await unaryCall(this.channel, "Health", {})) as WireHealthResponse);
  }

  async capacity(): Promise<HostCapacity> {
    return capacityFromProto((await unaryCall(this.channel, "GetCapacity", {})) as WireCapacity);
  }

  runContainer(req: RunContainerRequest): Promise<ContainerStatus> {
    return this.containers.runContainer(req);
  }

  stopContainer(id: string, opts?: { graceMs?: number; remove?: boolean }): Promise<ContainerStatus> {
    return this.containers.stopContainer(id, opts);
  }

  getContainer(id: string): Promise<ContainerStatus> {
    return this.containers.getContainer(id);
  }

  listContainers(filter?: { labels?: Record<string, string> }): Promise<ContainerStatus[]> {
    return this.containers.listContainers(filter);
  }

  /** Ends when the stream does; aborting `signal` (or leaving the loop) cancels the call on the agent. */
  streamLogs(
    id: string,
    opts?: { follow?: boolean; tail?: number; signal?: AbortSignal },
  ): AsyncGenerator<LogEntry> {
    return this.containers.streamLogs(id, opts);
  }

  /** The session's extra cancel() abandons the exec (the agent kills the process). */
  exec(id: string, req: ExecRequest): Promise<RpcExecSession> {
    return this.containers.exec(id, req);
  }

  pullImage(
    ref: string,
    opts?: { credentials?: { username: string; password: string } },
  ): Promise<ImageSummary> {
    return this.containers.pullImage(ref, opts);
  }

  listImages(): Promise<ImageSummary[]> {
    return this.containers.listImages();
  }

  removeImage(ref: string): Promise<void> {
    return this.containers.removeImage(ref);
  }

  importImage(req: ImportImageRequest): Promise<ImageSummary> {
    return this.containers.importImage(req);
  }

  gcImages(opts?: { unusedForMs?: number }): Promise<ImageGcResult> {
    return this.containers.gcImages(opts);
  }

  setNetworkPolicy(id: string, policy: EgressPolicy): Promise<ContainerStatus> {
    return this.containers.setNetworkPolicy(id, policy);
  }

  exposePort(id: string, port: number): Promise<ContainerStatus> {
    return this.containers.exposePort(id, port);
  }

  hasCode(sha256: string): Promise<boolean> {
    return this.containers.hasCode(sha256);
  }

  /** Streams the archive in chunks of at most 1 MiB; resolves once the agent stored and unpacked it. */
  putCode(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void> {
    return this.containers.putCode(sha256, data);
  }

  statPath(id: string, path: string): Promise<FileInfo> {
    return this.sandboxes.statPath(id, path);
  }

  listDir(id: string, path: string): Promise<FileInfo[]> {
    return this.sandboxes.listDir(id, path);
  }

  /** 64 KiB chunks; aborting `signal` (or leaving the loop) cancels the read on the agent. */
  readFile(id: string, path: string, opts?: { signal?: AbortSignal }): AsyncGenerator<Uint8Array> {
    return this.sandboxes.readFile(id, path, opts);
  }

  /** Streams `data` in chunks of at most 64 KiB; the file appears once the agent has all of it. */
  writeFile(id: string, path: string, data: AsyncIterable<Uint8Array>, opts?: { mode?: number }) {
    return this.sandboxes.writeFile(id, path, data, opts);
  }

  deleteFile(id: string, path: string): Promise<void> {
    return this.sandboxes.deleteFile(id, path);
  }

  createDirectory(id: string, path: string): Promise<FileInfo> {
    return this.sandboxes.createDirectory(id, path);
  }

  deleteDirectory(id: string, path: string): Promise<void> {
    return this.sandboxes.deleteDirectory(id, path);
  }

  findInFiles(id: string, path: string, pattern: string): Promise<FileSearchMatch[]> {
    return this.sandboxes.findInFiles(id, path, pattern);
  }

  replaceInFiles(id: string, path: string, oldString: string, newString: string): Promise<ReplaceResult[]> {
    return this.sandboxes.replaceInFiles(id, path, oldString, newString);
  }

  async *buildImage(req: BuildImageRequest, opts: { signal?: AbortSignal } = {}): AsyncGenerator<BuildEvent> {
    const wire = buildRequestToProto(req);
    for await (const w of streamCall<WireBuildEvent>(this.channel, "BuildImage", wire, opts)) {
      yield buildEventFromProto(w);
    }
  }

  commitFilesystem(id: string, ref: string): Promise<ImageSummary> {
    return this.sandboxes.commitFilesystem(id, ref);
  }

  checkpointSupport(): Promise<{ supported: boolean; reason?: string }> {
    return this.sandboxes.checkpointSupport();
  }

  checkpointMemory(id: string, snapshotId: string): Promise<{ snapshotId: string; sizeBytes: number }> {
    return this.sandboxes.checkpointMemory(id, snapshotId);
  }

  restoreMemory(snapshotId: string, req: RunContainerRequest): Promise<ContainerStatus> {
    return this.sandboxes.restoreMemory(snapshotId, req);
  }

  close(): void {
    this.processes.close();
    this.client.close();
  }
}
