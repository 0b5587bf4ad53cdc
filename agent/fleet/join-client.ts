import { nkeys } from "nats";
import { BerthError, describeError } from "../../shared/errors.ts";
import { sleep } from "../../shared/net.ts";
import type { AgentIdentity } from "./identity.ts";

export interface JoinParams {
  coordinator: string;
  joinToken: string;
  agentId?: string;
  hostname: string;
  version: string;
  grpcAddress: string;
  /** The host's NATS nkey seed, when it has one from an earlier join; else a new one is made. */
  natsSeed?: string;
}

interface JoinResponse {
  agent_id: string;
  heartbeat_interval_ms: number;
  /** user/password: the shared agent user (a coordinator without per-agent users); else the url alone. */
  nats: { url: string; user?: string; password?: string };
  tls: { ca_pem: string; cert_pem: string; key_pem: string };
  registry?: { url: string; username: string; password: string };
}

/** One join attempt. A refused token is final; an unreachable coordinator is `unavailable`. */
export async function joinOnce(p: JoinParams): Promise<AgentIdentity> {
  // The NATS identity is made here and only its public half leaves the host (docs/install.md, "Agent credentials").
  const seed = p.natsSeed ?? new TextDecoder().decode(nkeys.createUser().getSeed());
  const natsNkey = nkeys.fromSeed(new TextEncoder().encode(seed)).getPublicKey();
  let res: Response;
  try {
    res = await fetch(`${p.coordinator}/api/v1/agents/join`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        join_token: p.joinToken,
        ...(p.agentId ? { agent_id: p.agentId } : {}),
        hostname: p.hostname,
        version: p.version,
        grpc_address: p.grpcAddress,
        nats_nkey: natsNkey,
      }),
      signal: AbortSignal.timeout(10_000),
    });
  } catch (e) {
    throw new BerthError("unavailable", `cannot reach coordinator ${p.coordinator}: ${describeError(e)}`);
  }
  const body = (await res.json().catch(() => ({}))) as Partial<JoinResponse> & { error?: { code: string; message: string } };
  if (!res.ok) {
    const msg = body.error?.message ?? `HTTP ${res.status}`;
    if (res.status === 401) throw new BerthError("join_token_invalid", `coordinator refused the join: ${msg}`);
    if (res.status === 403) throw new BerthError("permission_denied", `coordinator refused the join: ${msg}`);
    if (res.status >= 500) throw new BerthError("unavailable", `coordinator ${p.coordinator} failed the join: ${msg}`);
    throw new BerthError("invalid_request", `coordinator refused the join: ${msg}`);
  }
  if (!body.agent_id || !body.nats || !body.tls) throw new BerthError("internal", "coordinator sent an incomplete join answer");
  return {
    agentId: body.agent_id,
    coordinator: p.coordinator,
    // An answer with the shared user is from a coordinator that keeps no per-agent users.
    nats: body.nats.password ? body.nats : { url: body.nats.url, seed },
    heartbeatIntervalMs: body.heartbeat_interval_ms ?? 5000,
    tls: { caPem: body.tls.ca_pem, certPem: body.tls.cert_pem, keyPem: body.tls.key_pem },
    ...(body.registry?.url ? { registry: body.registry } : {}),
  };
}

/** Joins, retrying while the coordinator is unreachable (it may be starting). */
export async function joinWithRetry(
  p: JoinParams,
  opts: { onRetry?: (err: BerthError, delayMs: number) => void; signal?: AbortSignal } = {},
): Promise<AgentIdentity> {
  let delay = 500;
  for (;;) {
    try {
      return await joinOnce(p);
    } catch (e) {
      if (!(e instanceof BerthError) || e.code !== "unavailable" || opts.signal?.aborted) throw e;
      opts.onRetry?.(e, delay);
      await sleep(delay);
      delay = Math.min(delay * 2, 10_000);
    }
  }
}
