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
}

interface JoinResponse {
  agent_id: string;
  heartbeat_interval_ms: number;
  nats: { url: string; user: string; password: string };
  tls: { ca_pem: string; cert_pem: string; key_pem: string };
  registry?: { url: string; username: string; password: string };
}

/** One join attempt. A refused token is final; an unreachable coordinator is `unavailable`. */
export async function joinOnce(p: JoinParams): Promise<AgentIdentity> {
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
    if (res.status >= 500) throw new BerthError("unavailable", `coordinator ${p.coordinator} failed the join: ${msg}`);
    throw new BerthError("invalid_request", `coordinator refused the join: ${msg}`);
  }
  if (!body.agent_id || !body.nats || !body.tls) throw new BerthError("internal", "coordinator sent an incomplete join answer");
  return {
    agentId: body.agent_id,
    coordinator: p.coordinator,
    nats: body.nats,
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
