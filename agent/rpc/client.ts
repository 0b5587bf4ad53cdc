// AgentApi over gRPC: to a local agent through its unix socket, or to a
// remote one over TCP with mutual TLS. Every call has a deadline; failures
// arrive as BerthErrors (see errors.ts).

import * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { HostCapacity } from "../../shared/fleet.ts";
import type { AgentApi, AgentHealth } from "./api.ts";
import { type WireCapacity, type WireHealthResponse, capacityFromProto, healthFromProto } from "./convert.ts";
import { fromGrpcError } from "./errors.ts";
import { loadAgentProto } from "./proto.ts";

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
}

export interface ResolvedAgentRpcClientOptions {
  address: string;
  transport: "unix" | "tls";
  tls?: AgentRpcClientTlsOptions;
  deadlineMs: number;
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
  if (o.address.startsWith("unix:")) {
    if (!o.address.startsWith("unix:///")) {
      throw new BerthError(
        "invalid_request",
        `agent client: a unix address needs an absolute path: unix:///path, got ${o.address}`,
      );
    }
    if (o.tls)
      throw new BerthError("invalid_request", "agent client: tls is not used on a unix socket; drop it");
    return { address: o.address, transport: "unix", deadlineMs };
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
  return { address: o.address, transport: "tls", tls: o.tls, deadlineMs };
}

type UnaryMethod = (
  request: object,
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
  callback: (err: grpc.ServiceError | null, res?: unknown) => void,
) => grpc.ClientUnaryCall;

export class AgentRpcClient implements AgentApi {
  readonly options: ResolvedAgentRpcClientOptions;
  private readonly client: grpc.Client;

  constructor(options: AgentRpcClientOptions) {
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
  }

  async health(): Promise<AgentHealth> {
    return healthFromProto((await this.unary("Health", {})) as WireHealthResponse);
  }

  async capacity(): Promise<HostCapacity> {
    return capacityFromProto((await this.unary("GetCapacity", {})) as WireCapacity);
  }

  close(): void {
    this.client.close();
  }

  private unary(method: string, request: object): Promise<unknown> {
    const { address, deadlineMs } = this.options;
    const fn = (this.client as unknown as Record<string, UnaryMethod>)[method];
    if (!fn)
      return Promise.reject(new BerthError("internal", `agent client: no method ${method} in agent.proto`));
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + deadlineMs);
      fn.call(this.client, request, new grpc.Metadata(), { deadline }, (err, res) => {
        if (err) reject(fromGrpcError(err, { address, deadlineMs }));
        else resolve(res);
      });
    });
  }
}
