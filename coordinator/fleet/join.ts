import { BerthError } from "../../shared/errors.ts";
import { newId } from "../../shared/ids.ts";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import { USER_NKEY_RE } from "../../shared/agent-nats.ts";
import type { NatsCredentials } from "../../shared/subjects.ts";
import type { AgentRepo, JoinTokenRepo } from "./store.ts";
import type { AgentNatsUsers, RevokedAgents } from "./agent-credentials.ts";
import { type ResumeFields, resumeProofProblem } from "../../shared/agent-resume.ts";

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

/** An agent that joined before, back with its own identity (shared/agent-resume.ts). */
export interface ResumeRequest extends ResumeFields {
  /** The certificate it was issued at join (or its last renewal). */
  certPem: string;
  /** Base64 signature of the fields by that certificate's key. */
  signature: string;
}

export interface ResumeGrant extends Omit<JoinGrant, "tls"> {
  /** The CA, and a new certificate for the agent's renew key when it asked for one. */
  tls: { caPem: string; certPem?: string };
}

export interface AgentCertIssuer {
  readonly caPem: string;
  issueAgentCert(
    agentId: string,
    names: { dnsNames: string[]; ipAddresses: string[]; publicKeyPem?: string },
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

  /** The cluster CA a host fetches before it joins, checked against the fingerprint it was given. */
  get caPem(): string {
    return this.deps.pki.caPem;
  }

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
      grpcAddress: joinHostPort(host, port),
    });
    const cert = await this.deps.pki.issueAgentCert(agentId, certNames(req.hostname, host));
    if (natsUsers && req.natsNkey) await natsUsers.add(agentId, req.natsNkey);
    return {
      agentId,
      nats: natsUsers && req.natsNkey ? { url: shared.url } : shared,
      heartbeatIntervalMs: this.deps.heartbeatIntervalMs,
      tls: { caPem: this.deps.pki.caPem, ...cert },
      ...(this.deps.registry ? { registry: handedRegistry(this.deps.registry) } : {}),
    };
  }

  /**
   * An agent that joined before comes back without the join token: its
   * certificate's key signs the request. A revoked agent is refused, so
   * revoking the join token stops new joins only.
   */
  async resume(req: ResumeRequest): Promise<ResumeGrant> {
    if (!AGENT_ID_RE.test(req.agentId)) {
      throw new BerthError("invalid_request", `agent id ${JSON.stringify(req.agentId)} is malformed`);
    }
    if (!HOSTNAME_RE.test(req.hostname)) {
      throw new BerthError(
        "invalid_request",
        `hostname ${JSON.stringify(req.hostname)} is not a valid host name`,
      );
    }
    const [host, port] = splitHostPort(req.grpcAddress);
    const problem = resumeProofProblem(req, req.certPem, req.signature, this.deps.pki.caPem);
    if (problem)
      throw new BerthError(
        "unauthenticated",
        `agent ${req.agentId} could not prove its identity: ${problem}`,
      );
    if (await this.deps.revoked?.isRevoked(req.agentId)) {
      throw new BerthError(
        "permission_denied",
        `agent ${req.agentId} was revoked; remove the host's identity file to join it as a new agent`,
      );
    }
    if (!(await this.deps.agents.get(req.agentId))) {
      throw new BerthError(
        "not_found",
        `agent ${req.agentId} is not known to this coordinator; join it again with a join token`,
      );
    }
    await this.deps.agents.upsertJoin({
      id: req.agentId,
      hostname: req.hostname,
      version: req.version,
      grpcAddress: joinHostPort(host, port),
    });
    const renewed = req.renewPublicKey
      ? await this.deps.pki.issueAgentCert(req.agentId, {
          ...certNames(req.hostname, host),
          publicKeyPem: req.renewPublicKey,
        })
      : undefined;
    const { natsUsers } = this.deps;
    const ownUser = natsUsers ? await natsUsers.has(req.agentId) : false;
    return {
      agentId: req.agentId,
      nats: ownUser ? { url: this.deps.agentNats.url } : this.deps.agentNats,
      heartbeatIntervalMs: this.deps.heartbeatIntervalMs,
      tls: { caPem: this.deps.pki.caPem, ...(renewed ? { certPem: renewed.certPem } : {}) },
      ...(this.deps.registry ? { registry: handedRegistry(this.deps.registry) } : {}),
    };
  }
}

/** The registry as agents get it: url and credentials; they trust the cluster CA, not the coordinator's file. */
function handedRegistry(r: ClusterRegistryAccess): ClusterRegistryAccess {
  return { url: r.url, username: r.username, password: r.password };
}

const joinHostPort = (host: string, port: number) => `${host.includes(":") ? `[${host}]` : host}:${port}`;

/** The names an agent's certificate carries besides its id. */
function certNames(hostname: string, host: string): { dnsNames: string[]; ipAddresses: string[] } {
  const isIp = /^[0-9.]+$/.test(host) || host.includes(":");
  return {
    dnsNames: [...new Set([hostname, "localhost", ...(isIp ? [] : [host])])],
    ipAddresses: [...new Set(["127.0.0.1", ...(isIp ? [host] : [])])],
  };
}

export function splitHostPort(addr: string): [string, number] {
  const m = /^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$/.exec(addr) ?? /^([A-Za-z0-9.-]+):(\d{1,5})$/.exec(addr);
  const port = Number(m?.[2]);
  if (!m?.[1] || !(port > 0 && port < 65536)) {
    throw new BerthError("invalid_request", `grpc address ${JSON.stringify(addr)} must be host:port`);
  }
  return [m[1], port];
}
