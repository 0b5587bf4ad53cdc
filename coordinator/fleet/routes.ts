import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { gpuCounts, type HostCapacity } from "../../shared/fleet.ts";
import type { FleetView } from "./fleet-view.ts";
import type { JoinService } from "./join.ts";
import type { AgentRevoker } from "./revoke.ts";
import type { AgentRecord, JoinTokenRecord } from "./store.ts";
import type { AgentRepo, JoinTokenRepo } from "./store.ts";
import { requireAdmin } from "../http/index.ts";
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
  }),
});

export const AgentBody = Type.Object({
  id: Type.String(),
  hostname: Type.String(),
  state: Type.Union([Type.Literal("ready"), Type.Literal("lost"), Type.Literal("left")]),
  version: Type.String(),
  grpc_address: Type.String(),
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
    grpc_address: live?.heartbeat.grpcAddress ?? rec.grpcAddress,
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

/** Public join route for hosts. */
export function joinRoutes(join: JoinService): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/agents/join",
      {
        schema: {
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
            200: Type.Object({
              agent_id: Type.String(),
              heartbeat_interval_ms: Type.Integer(),
              // user/password: the shared agent user; absent when the agent signs in with its own nkey.
              nats: Type.Object({
                url: Type.String(),
                user: Type.Optional(Type.String()),
                password: Type.Optional(Type.String()),
              }),
              tls: Type.Object({ ca_pem: Type.String(), cert_pem: Type.String(), key_pem: Type.String() }),
              registry: Type.Optional(
                Type.Object({ url: Type.String(), username: Type.String(), password: Type.String() }),
              ),
            }),
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
  };
}

/** Operator routes: the fleet and join tokens. Admin tokens only. */
export function fleetRoutes(
  store: { agents: AgentRepo; joinTokens: JoinTokenRepo },
  view: FleetView,
  revoker?: AgentRevoker,
): FastifyPluginAsync {
  return async (app) => {
    app.addHook("preHandler", async (req) => {
      requireAdmin(req);
    });

    app.get(
      "/api/v1/agents",
      { schema: { response: { 200: Type.Object({ agents: Type.Array(AgentBody) }), ...errors } } },
      async () => {
        const now = Date.now();
        return { agents: (await store.agents.list()).map((a) => agentJson(a, view, now)) };
      },
    );

    app.get(
      "/api/v1/agents/:agentId",
      {
        schema: { params: Type.Object({ agentId: Type.String() }), response: { 200: AgentBody, ...errors } },
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
          schema: {
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
      { schema: { response: { 200: Type.Object({ join_tokens: Type.Array(JoinTokenBody) }), ...errors } } },
      async () => ({ join_tokens: (await store.joinTokens.list()).map(joinTokenJson) }),
    );

    app.post(
      "/api/v1/join-token",
      {
        schema: {
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
        schema: {
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
