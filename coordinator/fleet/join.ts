import { BerthError } from "../../shared/errors.ts";
import { newId } from "../../shared/ids.ts";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import type { NatsCredentials } from "../../shared/subjects.ts";
import type { AgentRepo, JoinTokenRepo } from "../store/cluster.ts";

/** What a joining host is handed: its identity, where NATS is, and its TLS material. */
export interface JoinGrant {
  agentId: string;
  nats: NatsCredentials;
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
      agentNats: NatsCredentials;
      heartbeatIntervalMs: number;
      registry?: ClusterRegistryAccess;
    },
  ) {}

  async join(req: JoinRequest): Promise<JoinGrant> {
    if (!(await this.deps.joinTokens.verify(req.joinToken))) {
      throw new BerthError("join_token_invalid", "the join token is wrong or revoked");
    }
    if (!HOSTNAME_RE.test(req.hostname)) {
      throw new BerthError("invalid_request", `hostname ${JSON.stringify(req.hostname)} is not a valid host name`);
    }
    const [host, port] = splitHostPort(req.grpcAddress);
    if (req.agentId !== undefined && !AGENT_ID_RE.test(req.agentId)) {
      throw new BerthError("invalid_request", `agent id ${JSON.stringify(req.agentId)} is malformed`);
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
    return {
      agentId,
      nats: this.deps.agentNats,
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
