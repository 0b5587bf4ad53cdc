// `berth agent revoke ID`: cuts one host off NATS and gRPC at once
// (docs/install.md, "Agent credentials").

import type { NatsConnection, Subscription } from "nats";
import type { Logger } from "pino";
import { BerthError } from "../../shared/errors.ts";
import type { AgentRepo } from "./store.ts";
import type { AgentNatsUsers, RevokedAgents } from "./agent-credentials.ts";
import type { FleetView } from "./fleet-view.ts";

/** Core NATS, coordinator → coordinators: an agent was revoked (payload: its id). Agents may not subscribe to it. */
export const AGENT_REVOKED_SUBJECT = "berth.cluster.agent-revoked";

export interface RevokeResult {
  agentId: string;
  revokedAt: string;
  /**
   * "removed": its own NATS user is gone and its connection closed;
   * "shared_user": it joined before per-agent identities and still holds the
   * shared agent password (rotate it, docs/install.md); "none": it had no NATS user here.
   */
  nats: "removed" | "shared_user" | "none";
}

export interface AgentRevokerDeps {
  agents: AgentRepo;
  revoked: RevokedAgents;
  /** Absent when this coordinator does not manage nats-server's users. */
  natsUsers?: AgentNatsUsers;
  fleet: FleetView;
  /** The gRPC pool: the agent's connection is closed. */
  clients: { release?(agentId: string): void };
  nc?: NatsConnection;
  log?: Logger;
}

export class AgentRevoker {
  private sub?: Subscription;

  constructor(private readonly d: AgentRevokerDeps) {}

  async revoke(agentId: string): Promise<RevokeResult> {
    const rec = await this.d.agents.get(agentId);
    if (!rec) throw new BerthError("not_found", `agent ${agentId} not found`);
    const revokedAt = await this.d.revoked.revoke(agentId);
    let nats: RevokeResult["nats"];
    if (this.d.natsUsers && (await this.d.natsUsers.has(agentId))) {
      await this.d.natsUsers.remove(agentId);
      nats = "removed";
    } else {
      // No nkey recorded: it joined with the shared user (or never connected).
      nats = rec.lastSeenAt ? "shared_user" : "none";
    }
    this.cut(agentId);
    if (rec.state !== "left") await this.d.agents.setState(agentId, "left");
    this.d.nc?.publish(AGENT_REVOKED_SUBJECT, agentId);
    this.d.log?.warn({ agentId, nats }, `agent ${agentId} revoked`);
    return { agentId, revokedAt, nats };
  }

  /** Listens for revocations made by other coordinators. */
  start(): void {
    if (!this.d.nc) return;
    this.sub = this.d.nc.subscribe(AGENT_REVOKED_SUBJECT, {
      callback: (err, msg) => {
        if (err) return;
        const agentId = msg.string();
        if (!/^agent-[0-9a-z]{4,40}$/.test(agentId)) return;
        this.d.revoked.note(agentId);
        this.cut(agentId);
      },
    });
  }

  stop(): void {
    this.sub?.unsubscribe();
  }

  /** No more placements on it, and its gRPC connection goes (the pool refuses to dial it again). */
  private cut(agentId: string): void {
    this.d.fleet.leave(agentId);
    this.d.clients.release?.(agentId);
  }
}
