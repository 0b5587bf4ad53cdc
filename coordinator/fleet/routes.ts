import { type TSchema, Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { gpuCounts, type HostCapacity, poolOf } from "../../shared/fleet.ts";
import type { FleetView } from "./fleet-view.ts";
import type { JoinService } from "./join.ts";
import type { AgentRevoker } from "./revoke.ts";
import type { AgentRecord, JoinTokenRecord } from "./store.ts";
import type { AgentRepo, JoinTokenRepo } from "./store.ts";
import { ErrorResponse } from "../http/index.ts";

const errors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse };

const GpuDeviceBody = Type.Object({
  index: Type.Integer(),
  uuid: Type.String(),
  model: Type.String(),
  type: Type.String(),
  memory_mib: Type.Integer(),
  mig_profile: Type.Optional(Type.String()),
});

const CapacityBody = Type.Object({
  cpu_cores: Type.Number(),
  memory_bytes: Type.Number(),
  disk: Type.Object({ path: Type.String(), total_bytes: Type.Number(), free_bytes: Type.Number() }),
  gpus: Type.Object({
    available: Type.Boolean(),
    reason: Type.Optional(Type.String()),
    driver_version: Type.Optional(Type.String()),
    toolkit: Type.Boolean(),
    counts: Type.Record(Type.String(), Type.Integer()),
    devices: Type.Array(GpuDeviceBody),
    drained: Type.Array(
      Type.Object({
        index: Type.Integer(),
        uuid: Type.String(),
        model: Type.String(),
        reason: Type.String(),
        since: Type.String(),
        xid: Type.Optional(Type.Integer()),
      }),
      { description: "GPUs kept off new placements because the driver reported them unhealthy" },
    ),
  }),
});

export const AgentBody = Type.Object({
  id: Type.String(),
  hostname: Type.String(),
  state: Type.Union([Type.Literal("ready"), Type.Literal("lost"), Type.Literal("left")]),
  version: Type.String(),
  pool: Type.Union([Type.String(), Type.Null()], {
    description: "its pool (berth agent --pool); null until this coordinator hears from it",
  }),
  grpc_address: Type.String(),
  node_address: Type.Union([Type.String(), Type.Null()], {
    description:
      "where other agents' gang tunnels reach it (berth agent --node-address); null: unknown, so it takes no gang across hosts",
  }),
  joined_at: Type.String(),
  last_seen_at: Type.Union([Type.String(), Type.Null()]),
  capacity: Type.Union([CapacityBody, Type.Null()]),
});

const JoinTokenBody = Type.Object({
  id: Type.String(),
  description: Type.String(),
  prefix: Type.String(),
  created_at: Type.String(),
  revoked_at: Type.Union([Type.String(), Type.Null()]),
});

export function capacityJson(c: HostCapacity) {
  return {
    cpu_cores: c.cpuCores,
    memory_bytes: c.memoryBytes,
    disk: { path: c.disk.path, total_bytes: c.disk.totalBytes, free_bytes: c.disk.freeBytes },
    gpus: {
      available: c.gpus.available,
      ...(c.gpus.reason ? { reason: c.gpus.reason } : {}),
      ...(c.gpus.driverVersion ? { driver_version: c.gpus.driverVersion } : {}),
      toolkit: c.gpus.toolkit,
      counts: gpuCounts(c.gpus),
      devices: c.gpus.devices.map((d) => ({
        index: d.index,
        uuid: d.uuid,
        model: d.model,
        type: d.type,
        memory_mib: d.memoryMiB,
        ...(d.mig ? { mig_profile: d.mig.profile } : {}),
      })),
      drained: (c.gpus.drained ?? []).map((d) => ({
        index: d.index,
        uuid: d.uuid,
        model: d.model,
        reason: d.reason,
        since: new Date(d.since).toISOString(),
        ...(d.xid !== undefined ? { xid: d.xid } : {}),
      })),
    },
  };
}

/** Merges what the store remembers with what this coordinator sees live. */
export function agentJson(rec: AgentRecord, view: FleetView, now = Date.now()) {
  const live = view.get(rec.id);
  let state = live?.state ?? rec.state;
  const lastSeen = live ? new Date(live.lastSeen).toISOString() : rec.lastSeenAt;
  // A record another (or an earlier) coordinator wrote as ready goes stale
  // when no heartbeat confirms it.
  if (!live && state === "ready" && (!lastSeen || now - Date.parse(lastSeen) > 15_000)) state = "lost";
  const capacity = live?.heartbeat.capacity ?? rec.capacity;
  return {
    id: rec.id,
    hostname: live?.heartbeat.hostname ?? rec.hostname,
    state,
    version: live?.heartbeat.version ?? rec.version,
    pool: live ? poolOf(live.heartbeat) : null,
    grpc_address: live?.heartbeat.grpcAddress ?? rec.grpcAddress,
    node_address: live?.heartbeat.nodeAddress ?? null,
    joined_at: rec.joinedAt,
    last_seen_at: lastSeen,
    capacity: capacity ? capacityJson(capacity) : null,
  };
}

const joinTokenJson = (t: JoinTokenRecord) => ({
  id: t.id,
  description: t.description,
  prefix: t.prefix,
  created_at: t.createdAt,
  revoked_at: t.revokedAt,
});

/** What a join and a resume answer alike (their `tls` differs): the agent's id, heartbeat, NATS and registry access. */
function agentSessionBody<T extends TSchema>(tls: T) {
  return Type.Object({
    agent_id: Type.String(),
    heartbeat_interval_ms: Type.Integer(),
    // user/password: the shared agent user; absent when the agent signs in with its own nkey.
    nats: Type.Object({
      url: Type.String(),
      user: Type.Optional(Type.String()),
      password: Type.Optional(Type.String()),
    }),
    tls,
    registry: Type.Optional(
      Type.Object({ url: Type.String(), username: Type.String(), password: Type.String() }),
    ),
  });
}

/** Public routes for hosts: join (with a join token) and resume (with their own certificate). */
export function joinRoutes(join: JoinService): FastifyPluginAsync {
  return async (app) => {
    // The cluster CA, public: a host about to join over HTTPS checks it against the fingerprint
    // `berth up` printed (its join command's --ca-fingerprint), then trusts only it.
    app.get(
      "/api/v1/agents/ca",
      {
        schema: {
          summary: "The cluster CA's certificate, which a joining host checks against its fingerprint",
          response: { 200: Type.Object({ ca_pem: Type.String() }), ...errors },
        },
      },
      async () => ({ ca_pem: join.caPem }),
    );

    app.post(
      "/api/v1/agents/join",
      {
        schema: {
          summary:
            "Joins a host with a join token; answers its agent id, certificate, NATS and registry access",
          body: Type.Object(
            {
              join_token: Type.String({ minLength: 1 }),
              agent_id: Type.Optional(Type.String()),
              hostname: Type.String({ minLength: 1 }),
              version: Type.String(),
              grpc_address: Type.String(),
              nats_nkey: Type.Optional(Type.String({ maxLength: 64 })),
            },
            { additionalProperties: false },
          ),
          response: {
            200: agentSessionBody(
              Type.Object({ ca_pem: Type.String(), cert_pem: Type.String(), key_pem: Type.String() }),
            ),
            ...errors,
          },
        },
      },
      async (req) => {
        const b = req.body as {
          join_token: string;
          agent_id?: string;
          hostname: string;
          version: string;
          grpc_address: string;
          nats_nkey?: string;
        };
        const g = await join.join({
          joinToken: b.join_token,
          ...(b.agent_id ? { agentId: b.agent_id } : {}),
          hostname: b.hostname,
          version: b.version,
          grpcAddress: b.grpc_address,
          ...(b.nats_nkey !== undefined ? { natsNkey: b.nats_nkey } : {}),
        });
        return {
          agent_id: g.agentId,
          heartbeat_interval_ms: g.heartbeatIntervalMs,
          nats: g.nats,
          tls: { ca_pem: g.tls.caPem, cert_pem: g.tls.certPem, key_pem: g.tls.keyPem },
          ...(g.registry ? { registry: g.registry } : {}),
        };
      },
    );

    // An agent that joined before, back at a start with its own certificate instead of the join token.
    app.post(
      "/api/v1/agents/resume",
      {
        schema: {
          summary:
            "An agent that joined before, back with a request signed by its certificate; answers its NATS and registry access",
          body: Type.Object(
            {
              agent_id: Type.String({ minLength: 1, maxLength: 64 }),
              hostname: Type.String({ minLength: 1 }),
              version: Type.String({ maxLength: 200 }),
              grpc_address: Type.String({ maxLength: 300 }),
              signed_at: Type.String({ maxLength: 40 }),
              cert_pem: Type.String({ minLength: 1, maxLength: 16_384 }),
              signature: Type.String({ minLength: 1, maxLength: 2048 }),
              renew_public_key: Type.Optional(Type.String({ maxLength: 4096 })),
            },
            { additionalProperties: false },
          ),
          response: {
            // cert_pem: only when renew_public_key was sent; the private key never leaves the host.
            200: agentSessionBody(
              Type.Object({ ca_pem: Type.String(), cert_pem: Type.Optional(Type.String()) }),
            ),
            ...errors,
          },
        },
      },
      async (req) => {
        const b = req.body as {
          agent_id: string;
          hostname: string;
          version: string;
          grpc_address: string;
          signed_at: string;
          cert_pem: string;
          signature: string;
          renew_public_key?: string;
        };
        const g = await join.resume({
          agentId: b.agent_id,
          hostname: b.hostname,
          version: b.version,
          grpcAddress: b.grpc_address,
          signedAt: b.signed_at,
          certPem: b.cert_pem,
          signature: b.signature,
          ...(b.renew_public_key ? { renewPublicKey: b.renew_public_key } : {}),
        });
        return {
          agent_id: g.agentId,
          heartbeat_interval_ms: g.heartbeatIntervalMs,
          nats: g.nats,
          tls: { ca_pem: g.tls.caPem, ...(g.tls.certPem ? { cert_pem: g.tls.certPem } : {}) },
          ...(g.registry ? { registry: g.registry } : {}),
        };
      },
    );
  };
}

/** Operator routes: the fleet and join tokens. Cluster admin tokens only (each route's access). */
export function fleetRoutes(
  store: { agents: AgentRepo; joinTokens: JoinTokenRepo },
  view: FleetView,
  revoker?: AgentRevoker,
): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/agents",
      {
        config: { access: { needs: "cluster" } },
        schema: {
          summary: "The agents that joined the cluster, with their state and capacity",
          response: { 200: Type.Object({ agents: Type.Array(AgentBody) }), ...errors },
        },
      },
      async () => {
        const now = Date.now();
        return { agents: (await store.agents.list()).map((a) => agentJson(a, view, now)) };
      },
    );

    app.get(
      "/api/v1/agents/:agentId",
      {
        config: { access: { needs: "cluster" } },
        schema: {
          summary: "One agent, with its state and capacity",
          params: Type.Object({ agentId: Type.String() }),
          response: { 200: AgentBody, ...errors },
        },
      },
      async (req) => {
        const { agentId } = req.params as { agentId: string };
        const rec = await store.agents.get(agentId);
        if (!rec) throw new BerthError("not_found", `agent ${agentId} not found`);
        return agentJson(rec, view);
      },
    );

    if (revoker) {
      app.post(
        "/api/v1/agents/:agentId/revoke",
        {
          config: { access: { needs: "cluster", audit: "agent.revoke" } },
          schema: {
            summary:
              "Revokes an agent: cuts it off NATS and gRPC; answers when and what became of its NATS user",
            params: Type.Object({ agentId: Type.String() }),
            response: {
              200: Type.Object({
                agent_id: Type.String(),
                revoked_at: Type.String(),
                nats: Type.Union([
                  Type.Literal("removed"),
                  Type.Literal("shared_user"),
                  Type.Literal("none"),
                ]),
              }),
              ...errors,
            },
          },
        },
        async (req) => {
          const r = await revoker.revoke((req.params as { agentId: string }).agentId);
          return { agent_id: r.agentId, revoked_at: r.revokedAt, nats: r.nats };
        },
      );
    }

    app.get(
      "/api/v1/join-token",
      {
        config: { access: { needs: "cluster" } },
        schema: {
          summary: "The join tokens, revoked ones included (never their secrets)",
          response: { 200: Type.Object({ join_tokens: Type.Array(JoinTokenBody) }), ...errors },
        },
      },
      async () => ({ join_tokens: (await store.joinTokens.list()).map(joinTokenJson) }),
    );

    app.post(
      "/api/v1/join-token",
      {
        config: { access: { needs: "cluster", audit: "join_token.create" } },
        schema: {
          summary: "Creates a join token for adding hosts; answers its secret, shown this once",
          body: Type.Optional(
            Type.Object(
              { description: Type.Optional(Type.String({ maxLength: 200 })) },
              { additionalProperties: false },
            ),
          ),
          response: { 201: Type.Object({ join_token: Type.String(), info: JoinTokenBody }), ...errors },
        },
      },
      async (req, reply) => {
        const { description } = (req.body ?? {}) as { description?: string };
        const { record, secret } = await store.joinTokens.create(description ?? "");
        reply.status(201);
        return { join_token: secret, info: joinTokenJson(record) };
      },
    );

    app.delete(
      "/api/v1/join-token/:id",
      {
        config: { access: { needs: "cluster", audit: "join_token.revoke" } },
        schema: {
          summary: "Revokes a join token: no new host joins with it; joined agents stay",
          params: Type.Object({ id: Type.String() }),
          response: { 200: Type.Object({ revoked: Type.Boolean() }), ...errors },
        },
      },
      async (req) => {
        await store.joinTokens.revoke((req.params as { id: string }).id);
        return { revoked: true };
      },
    );
  };
}
