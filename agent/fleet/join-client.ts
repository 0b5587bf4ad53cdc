import { generateKeyPairSync } from "node:crypto";
import { get as httpsGet } from "node:https";
import { CERT_RENEW_BEFORE_MS, certExpiresInMs, signResume } from "../../shared/agent-resume.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { sleep } from "../../shared/net.ts";
import { caFingerprint, fetchTrusting } from "../../shared/tls-fetch.ts";
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
  /** The cluster CA, checked against --ca-fingerprint (fetchClusterCa): the only CA an https:// coordinator is trusted through. */
  caPem?: string;
}

interface JoinResponse {
  agent_id: string;
  heartbeat_interval_ms: number;
  /** user/password: the shared agent user (a coordinator without per-agent users); else the url alone. */
  nats: { url: string; user?: string; password?: string };
  tls: { ca_pem: string; cert_pem: string; key_pem: string };
  registry?: { url: string; username: string; password: string };
}

/** The coordinator's answer as a BerthError: refusals are final, its failures and absence `unavailable`. */
function refusal(what: string, coordinator: string, status: number, msg: string, code?: string): BerthError {
  if (status === 401 && code === "join_token_invalid")
    return new BerthError("join_token_invalid", `coordinator refused the ${what}: ${msg}`);
  if (status === 401) return new BerthError("unauthenticated", `coordinator refused the ${what}: ${msg}`);
  if (status === 403) return new BerthError("permission_denied", `coordinator refused the ${what}: ${msg}`);
  if (status === 404) return new BerthError("not_found", `coordinator refused the ${what}: ${msg}`);
  if (status >= 500)
    return new BerthError("unavailable", `coordinator ${coordinator} failed the ${what}: ${msg}`);
  return new BerthError("invalid_request", `coordinator refused the ${what}: ${msg}`);
}

async function post<T>(
  coordinator: string,
  path: string,
  what: string,
  body: unknown,
  /** The cluster CA an https:// coordinator's certificate chains to, when known. */
  caPem?: string,
): Promise<T> {
  let res: Response;
  try {
    res = await fetchTrusting(caPem)(`${coordinator}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
  } catch (e) {
    throw new BerthError("unavailable", `cannot reach coordinator ${coordinator}: ${describeError(e)}`);
  }
  const answer = (await res.json().catch(() => ({}))) as T & { error?: { code: string; message: string } };
  if (!res.ok) {
    throw refusal(
      what,
      coordinator,
      res.status,
      answer.error?.message ?? `HTTP ${res.status}`,
      answer.error?.code,
    );
  }
  return answer;
}

export interface ResumeParams {
  hostname: string;
  version: string;
  grpcAddress: string;
}

interface ResumeResponse {
  agent_id: string;
  heartbeat_interval_ms: number;
  nats: { url: string; user?: string; password?: string };
  tls: { ca_pem: string; cert_pem?: string };
  registry?: { url: string; username: string; password: string };
}

/**
 * One resume: the host's saved identity proves itself with its certificate's
 * key instead of a join token (shared/agent-resume.ts). Within 30 days of the
 * certificate's expiry it sends a key made here for a new one.
 */
export async function resumeOnce(saved: AgentIdentity, p: ResumeParams): Promise<AgentIdentity> {
  const renew =
    certExpiresInMs(saved.tls.certPem) < CERT_RENEW_BEFORE_MS
      ? generateKeyPairSync("rsa", {
          modulusLength: 2048,
          publicKeyEncoding: { type: "spki", format: "pem" },
          privateKeyEncoding: { type: "pkcs8", format: "pem" },
        })
      : undefined;
  const fields = {
    agentId: saved.agentId,
    hostname: p.hostname,
    version: p.version,
    grpcAddress: p.grpcAddress,
    signedAt: new Date().toISOString(),
    ...(renew ? { renewPublicKey: renew.publicKey } : {}),
  };
  const body = await post<Partial<ResumeResponse>>(
    saved.coordinator,
    "/api/v1/agents/resume",
    "resume",
    {
      agent_id: fields.agentId,
      hostname: fields.hostname,
      version: fields.version,
      grpc_address: fields.grpcAddress,
      signed_at: fields.signedAt,
      cert_pem: saved.tls.certPem,
      signature: signResume(fields, saved.tls.keyPem),
      ...(renew ? { renew_public_key: renew.publicKey } : {}),
    },
    saved.tls.caPem,
  );
  if (body.agent_id !== saved.agentId || !body.nats || !body.tls?.ca_pem)
    throw new BerthError("internal", "coordinator sent an incomplete resume answer");
  const { registry: _old, ...rest } = saved;
  return {
    ...rest,
    // Its own nkey user stays; an agent that never had one keeps the shared user as the coordinator names it.
    nats: saved.nats.seed ? { url: body.nats.url, seed: saved.nats.seed } : body.nats,
    heartbeatIntervalMs: body.heartbeat_interval_ms ?? saved.heartbeatIntervalMs,
    tls: {
      caPem: body.tls.ca_pem,
      certPem: renew && body.tls.cert_pem ? body.tls.cert_pem : saved.tls.certPem,
      keyPem: renew && body.tls.cert_pem ? renew.privateKey : saved.tls.keyPem,
    },
    ...(body.registry?.url ? { registry: body.registry } : {}),
  };
}

/** One join attempt. A refused token is final; an unreachable coordinator is `unavailable`. */
export async function joinOnce(p: JoinParams): Promise<AgentIdentity> {
  // The NATS identity is made here and only its public half leaves the host (docs/install.md, "Agent credentials").
  // nats is loaded only by an agent that joins a coordinator: an edge agent never needs it.
  const { nkeys } = await import("nats");
  const seed = p.natsSeed ?? new TextDecoder().decode(nkeys.createUser().getSeed());
  const natsNkey = nkeys.fromSeed(new TextEncoder().encode(seed)).getPublicKey();
  const body = await post<Partial<JoinResponse>>(
    p.coordinator,
    "/api/v1/agents/join",
    "join",
    {
      join_token: p.joinToken,
      ...(p.agentId ? { agent_id: p.agentId } : {}),
      hostname: p.hostname,
      version: p.version,
      grpc_address: p.grpcAddress,
      nats_nkey: natsNkey,
    },
    p.caPem,
  );
  if (!body.agent_id || !body.nats || !body.tls)
    throw new BerthError("internal", "coordinator sent an incomplete join answer");
  if (p.caPem && caFingerprint(body.tls.ca_pem) !== caFingerprint(p.caPem))
    throw new BerthError(
      "permission_denied",
      "the coordinator handed over a CA other than the one whose fingerprint this host was given",
    );
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

/**
 * The cluster CA of an https:// coordinator, before the host trusts anything of it: fetched
 * without checking the server's certificate (the CA is what would check it), then accepted only
 * when its SHA-256 fingerprint is the one the operator gave (`berth up --advertise` prints it).
 * Everything after, the join too, verifies the coordinator, NATS and the registry against it.
 */
export async function fetchClusterCa(coordinator: string, fingerprint: string): Promise<string> {
  const url = new URL(`${coordinator}/api/v1/agents/ca`);
  if (url.protocol !== "https:")
    throw new BerthError(
      "invalid_request",
      `--ca-fingerprint is for an https:// coordinator; ${coordinator} is plain HTTP`,
    );
  const text = await new Promise<string>((resolve, reject) => {
    const req = httpsGet(url, { rejectUnauthorized: false, timeout: 10_000 }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        data += d;
      });
      res.on("end", () =>
        res.statusCode === 200
          ? resolve(data)
          : reject(
              new BerthError(
                res.statusCode === 404 ? "not_found" : "unavailable",
                `coordinator ${coordinator} answered HTTP ${res.statusCode} for its CA`,
              ),
            ),
      );
    });
    req.on("timeout", () => req.destroy(new Error("no answer within 10 s")));
    req.on("error", (e) =>
      reject(new BerthError("unavailable", `cannot reach coordinator ${coordinator}: ${describeError(e)}`)),
    );
  });
  let caPem: string;
  let got: string;
  try {
    caPem = (JSON.parse(text) as { ca_pem: string }).ca_pem;
    got = caFingerprint(caPem);
  } catch {
    throw new BerthError("internal", `coordinator ${coordinator} sent no CA certificate`);
  }
  if (got !== fingerprint)
    throw new BerthError(
      "permission_denied",
      `the CA coordinator ${coordinator} presents has fingerprint ${got}, not ${fingerprint}: ` +
        "check --ca-fingerprint against what berth up printed (or something between this host and it answers in its place)",
    );
  return caPem;
}

/** Runs a join, resume or CA fetch, retrying while the coordinator is unreachable (it may be starting). */
export async function withRetry<T = AgentIdentity>(
  attempt: () => Promise<T>,
  opts: { onRetry?: (err: BerthError, delayMs: number) => void; signal?: AbortSignal } = {},
): Promise<T> {
  let delay = 500;
  for (;;) {
    try {
      return await attempt();
    } catch (e) {
      if (!(e instanceof BerthError) || e.code !== "unavailable" || opts.signal?.aborted) throw e;
      opts.onRetry?.(e, delay);
      await sleep(delay);
      delay = Math.min(delay * 2, 10_000);
    }
  }
}

/** Joins, retrying while the coordinator is unreachable. */
export const joinWithRetry = (p: JoinParams, opts: Parameters<typeof withRetry>[1] = {}) =>
  withRetry(() => joinOnce(p), opts);
