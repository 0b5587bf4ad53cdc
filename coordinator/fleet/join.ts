import { BerthError } from "../../shared/errors.ts";
import { newId } from "../../shared/ids.ts";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import { USER_NKEY_RE } from "../../shared/agent-nats.ts";
import type { NatsCredentials } from "../../shared/subjects.ts";
import type { AgentRepo, JoinTokenRepo } from "./store.ts";
import type { AgentNatsUsers, RevokedAgents } from "./agent-credentials.ts";

/** What a joining host is handed: its identity, where NATS is, and its TLS material. */
export interface JoinGrant {
  agentId: string;
  /** The shared agent user, or (per-agent identity) the NATS url alone: the agent signs in with its own nkey. */
  nats: { url: string; user?: string; password?: string };
  heartbeatIntervalMs: number;
  tls: { caPem: string; certPem: string; keyPem: string };
  /** The cluster registry built images go to, and its credentials (docs/images.md). */
  registry?: ClusterRegistryAccess;
}

export interface JoinRequest {
  joinToken: string;
  /** Set when the host joined before and kept its identity. */
  agentId?: string;
  hostname: string;
  version: string;
  /** host:port of the agent's TLS gRPC listener as coordinators should dial it. */
  grpcAddress: string;
  /** Public nkey (U...) of the NATS identity the agent made for itself; absent from agents older than per-agent identities. */
  natsNkey?: string;
}

export interface AgentCertIssuer {
  readonly caPem: string;
  issueAgentCert(
    agentId: string,
    names: { dnsNames: string[]; ipAddresses: string[] },
  ): Promise<{ certPem: string; keyPem: string }> | { certPem: string; keyPem: string };
}

const AGENT_ID_RE = /^agent-[0-9a-z]{4,40}$/;
const HOSTNAME_RE = /^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$/;

export class JoinService {
  constructor(
    private readonly deps: {
      joinTokens: JoinTokenRepo;
      agents: AgentRepo;
      pki: AgentCertIssuer;
      /** The shared agent user: for agents that send no nkey; password "" = none is offered. */
      agentNats: NatsCredentials;
      /** Set when this coordinator manages nats-server's users: each agent gets its own. */
      natsUsers?: AgentNatsUsers;
      revoked?: RevokedAgents;
      heartbeatIntervalMs: number;
      registry?: ClusterRegistryAccess;
    },
  ) {}

  async join(req: JoinRequest): Promise<JoinGrant> {
    if (!(await this.deps.joinTokens.verify(req.joinToken))) {
      throw new BerthError("join_token_invalid", "the join token is wrong or revoked");
    }
    if (!HOSTNAME_RE.test(req.hostname)) {
      throw new BerthError(
        "invalid_request",
        `hostname ${JSON.stringify(req.hostname)} is not a valid host name`,
      );
    }
    const [host, port] = splitHostPort(req.grpcAddress);
    if (req.agentId !== undefined && !AGENT_ID_RE.test(req.agentId)) {
      throw new BerthError("invalid_request", `agent id ${JSON.stringify(req.agentId)} is malformed`);
    }
    if (req.natsNkey !== undefined && !USER_NKEY_RE.test(req.natsNkey)) {
      throw new BerthError(
        "invalid_request",
        "nats_nkey must be a user nkey's public key (U and 55 base32 characters)",
      );
    }
    if (req.agentId !== undefined && (await this.deps.revoked?.isRevoked(req.agentId))) {
      throw new BerthError(
        "permission_denied",
        `agent ${req.agentId} was revoked; remove the host's identity file to join it as a new agent`,
      );
    }
    const { natsUsers } = this.deps;
    const shared = this.deps.agentNats;
    if (!(natsUsers && req.natsNkey) && !shared.password) {
      throw new BerthError(
        "invalid_request",
        "this coordinator hands each agent its own NATS identity and the agent sent no nats_nkey: upgrade berth on the host",
      );
    }
    const agentId = req.agentId ?? newId("agent");
    await this.deps.agents.upsertJoin({
      id: agentId,
      hostname: req.hostname,
      version: req.version,
      grpcAddress: `${host.includes(":") ? `[${host}]` : host}:${port}`,
    });
    const isIp = /^[0-9.]+$/.test(host) || host.includes(":");
    const names = {
      dnsNames: [...new Set([req.hostname, "localhost", ...(isIp ? [] : [host])])],
      ipAddresses: [...new Set(["127.0.0.1", ...(isIp ? [host] : [])])],
    };
    const cert = await this.deps.pki.issueAgentCert(agentId, names);
    if (natsUsers && req.natsNkey) await natsUsers.add(agentId, req.natsNkey);
    return {
      agentId,
      nats: natsUsers && req.natsNkey ? { url: shared.url } : shared,
      heartbeatIntervalMs: this.deps.heartbeatIntervalMs,
      tls: { caPem: this.deps.pki.caPem, ...cert },
      ...(this.deps.registry ? { registry: this.deps.registry } : {}),
    };
  }
}

export function splitHostPort(addr: string): [string, number] {
  const m = /^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$/.exec(addr) ?? /^([A-Za-z0-9.-]+):(\d{1,5})$/.exec(addr);
  const port = Number(m?.[2]);
  if (!m?.[1] || !(port > 0 && port < 65536)) {
    throw new BerthError("invalid_request", `grpc address ${JSON.stringify(addr)} must be host:port`);
  }
  return [m[1], port];
}
