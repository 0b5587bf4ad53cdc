// One gRPC client per agent, dialled over mutual TLS at the address from the
// agent's heartbeat. The server certificate is checked against the agent id
// (agents are dialled by IP but named by id).

import { AgentRpcClient } from "../../api/grpc/index.ts";
import type { ContainerApi } from "../../api/index.ts";
import type { ContainerFilesApi, ContainerSnapshotApi } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import type { FleetView } from "../fleet/index.ts";
import type { AgentClients } from "./types.ts";

export interface AgentClientPoolOptions {
  fleet: FleetView;
  /** The cluster PKI (ClusterPki): the CA to trust and the coordinator's client certificate. */
  pki: { caPem: string; issueCoordinatorClientCert(): Promise<{ certPem: string; keyPem: string }> };
  /** Per-call deadline. @default 10000 */
  deadlineMs?: number;
  /** Agents cut off by `berth agent revoke`: never dialled (coordinator/fleet/revoke.ts). */
  revoked?: { has(agentId: string): boolean };
}

/** What the coordinator calls on one agent: containers, their files and snapshots. AgentRpcClient is all three. */
export type AgentClient = ContainerApi & ContainerFilesApi & ContainerSnapshotApi;

export class AgentClientPool implements AgentClients {
  private readonly clients = new Map<string, AgentRpcClient>();

  private constructor(
    private readonly fleet: FleetView,
    private readonly tls: { caPem: string; certPem: string; keyPem: string },
    private readonly deadlineMs: number | undefined,
    private readonly revoked?: { has(agentId: string): boolean },
  ) {}

  /** Issues the coordinator's client certificate once for every connection. */
  static async create(o: AgentClientPoolOptions): Promise<AgentClientPool> {
    const cert = await o.pki.issueCoordinatorClientCert();
    return new AgentClientPool(
      o.fleet,
      { caPem: o.pki.caPem, certPem: cert.certPem, keyPem: cert.keyPem },
      o.deadlineMs,
      o.revoked,
    );
  }

  client(agentId: string): AgentRpcClient & AgentClient {
    if (this.revoked?.has(agentId)) {
      throw new BerthError("failed_precondition", `agent ${agentId} is revoked: berth no longer talks to it`);
    }
    const address = this.fleet.get(agentId)?.heartbeat.grpcAddress;
    if (!address) throw new BerthError("unavailable", `agent ${agentId} has not reported a gRPC address`);
    const existing = this.clients.get(agentId);
    // A restarted agent may listen elsewhere.
    if (existing && existing.options.address === address) return existing;
    existing?.close();
    const c = new AgentRpcClient({
      address,
      tls: { ...this.tls, serverNameOverride: agentId },
      ...(this.deadlineMs ? { deadlineMs: this.deadlineMs } : {}),
    });
    this.clients.set(agentId, c);
    return c;
  }

  release(agentId: string): void {
    this.clients.get(agentId)?.close();
    this.clients.delete(agentId);
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}
