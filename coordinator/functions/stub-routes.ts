import { checkStubVolumes } from "../../shared/volumes.ts";
import { Type } from "@sinclair/typebox";
import { BotDefinitionSchema } from "../bots/index.ts";
import type { FastifyPluginAsync } from "fastify";
import { STUB_TYPES, type StubConfig, type StubExtra } from "../../shared/tasks.ts";
import { resolveEgressPolicy } from "../../shared/egress.ts";
import { POOL_NAME_RE } from "../../shared/fleet.ts";
import { MAX_GANG_NODES } from "../../shared/gang.ts";
import { BerthError } from "../../shared/errors.ts";
import type { StubRecord } from "../tasks/index.ts";
import type { TaskService } from "../tasks/index.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";

/** StubConfig of shared/tasks.ts, field for field. */
export const StubConfigSchema = Type.Object({
  runtime: Type.Object({
    cpu: Type.Integer({ minimum: 0 }),
    gpu: Type.String(),
    memory: Type.Integer({ minimum: 0 }),
    image_id: Type.String(),
  }),
  handler: Type.String({ pattern: "^[A-Za-z_][\\w.]*:[A-Za-z_]\\w*$" }),
  on_start: Type.String(),
  python_version: Type.String(),
  keep_warm_seconds: Type.Integer(),
  max_pending_tasks: Type.Integer({ minimum: 0 }),
  callback_url: Type.String(),
  task_policy: Type.Object({
    max_retries: Type.Integer({ minimum: 0 }),
    timeout: Type.Integer({ minimum: -1 }),
    expires: Type.String(),
  }),
  workers: Type.Integer({ minimum: 1 }),
  authorized: Type.Boolean(),
  // One JSON type list, not anyOf [null, array]: with coerceTypes "array", Ajv
  // unwraps a one-element list while trying the null branch and then refuses it.
  // Entries are checked by checkStubVolumes.
  volumes: Type.Unsafe<unknown[] | null>({ type: ["array", "null"], items: {} }),
  autoscaler: Type.Object({
    type: Type.String(),
    max_containers: Type.Integer({ minimum: 0 }),
    tasks_per_container: Type.Integer({ minimum: 0 }),
  }),
});

export const StubExtraSchema = Type.Object({
  cpu_millicores: Type.Integer({ minimum: 0 }),
  gpu_types: Type.Array(Type.String()),
  gpu_count: Type.Integer({ minimum: 0 }),
  /** Every stub type: a share of one shared GPU, in MiB (docs/gpus.md, "Shared GPUs"). */
  gpu_memory_mib: Type.Optional(Type.Integer({ minimum: 1, maximum: 16 * 1024 * 1024 })),
  retry_for: Type.Array(Type.String()),
  image_ref: Type.String(),
  code_sha256: Type.String({ pattern: "^([0-9a-f]{64})?$" }),
  secrets: Type.Array(Type.String()),
  headless: Type.Boolean(),
  min_containers: Type.Optional(Type.Integer({ minimum: 0 })),
  concurrent_requests: Type.Optional(Type.Integer({ minimum: 1 })),
  when: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  handler_params: Type.Optional(
    Type.Object({
      names: Type.Array(Type.String()),
      required: Type.Array(Type.String()),
      var_keyword: Type.Boolean(),
      context: Type.Boolean(),
    }),
  ),
  entrypoint: Type.Optional(Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 256 })),
  ports: Type.Optional(Type.Array(Type.Integer({ minimum: 1, maximum: 65535 }), { maxItems: 32 })),
  block_network: Type.Optional(Type.Boolean()),
  allow_list: Type.Optional(Type.Array(Type.String({ maxLength: 64 }))),
  ttl_seconds: Type.Optional(Type.Integer({ minimum: -1 })),
  /** Every stub type: "gvisor" runs its containers under gVisor (docs/runtime.md, "OCI runtimes"). */
  isolation: Type.Optional(Type.Union([Type.Literal("container"), Type.Literal("gvisor")])),
  /** Every stub type: only agents of this pool run its containers (docs/pools.md). */
  pool: Type.Optional(Type.String({ pattern: POOL_NAME_RE.source })),
  /** Every stub type: placement order, higher first (docs/gpus.md, "Priorities and preemption"). */
  priority: Type.Optional(Type.Integer({ minimum: -1000, maximum: 1000 })),
  /** Every stub type: its running containers may be preempted for higher-priority work. */
  preemptible: Type.Optional(Type.Boolean()),
  /** Functions, task queues and pods: each container is a gang of this many hosts (checked in the route). */
  nodes: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_GANG_NODES })),
  /** Endpoint and asgi: model names the /v1 gateway routes here (docs/inference.md). */
  served_models: Type.Optional(
    Type.Array(Type.String({ pattern: "^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$" }), {
      minItems: 1,
      maxItems: 32,
      uniqueItems: true,
    }),
  ),
  /** Bot deployments: locations, transitions and model (docs/bots.md). */
  bot: Type.Optional(BotDefinitionSchema),
  /** Pods and sandboxes: the container's environment (`env=`); secrets win on a clash. */
  env: Type.Optional(Type.Record(Type.String({ pattern: "^[A-Za-z_][A-Za-z0-9_]*$" }), Type.String())),
});

/** StubConfigSchema whose handler may be empty: sandbox and pod stubs run none (checked in the route). */
const StubConfigOrNoHandlerSchema = Type.Object({
  ...StubConfigSchema.properties,
  handler: Type.String({ pattern: "^([A-Za-z_][\\w.]*:[A-Za-z_]\\w*)?$" }),
});

const StubBody = Type.Object({
  id: Type.String(),
  name: Type.String(),
  type: Type.String(),
  config_version: Type.Integer(),
  object_id: Type.Union([Type.Integer(), Type.Null()]),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const stubJson = (s: StubRecord) => ({
  id: s.id,
  name: s.name,
  type: s.type,
  config_version: s.configVersion,
  object_id: s.objectId,
  created_at: s.createdAt,
  updated_at: s.updatedAt,
});

const STUB_TYPE_PATTERN = `^(${STUB_TYPES.join("|")})(/serve)?$`;

/**
 * Stub types whose containers may be gangs (extra.nodes > 1). Functions and
 * task queues: their containers are the same runner pulling the stub's tasks
 * one by one, so rank 0 takes each task and hands it to the other ranks
 * (shared/gang.ts) whatever the kind. Pods run their own entrypoint on every
 * rank. HTTP-served kinds take many requests at once on one container and
 * sandboxes are interactive: neither has one task a gang could run together.
 */
const GANG_STUB_TYPES = ["function", "taskqueue", "pod"];

/**
 * extra.nodes: only where a gang makes sense, and one task per gang at a
 * time (every rank runs the same task, so a rank taking a second one would
 * run it alone): nodes > 1 refuses workers, tasks_per_container and
 * concurrent_requests above 1.
 */
function checkGangNodes(b: { type: string; config: StubConfig; extra: StubExtra }): void {
  const nodes = b.extra.nodes;
  if (nodes === undefined || nodes === 1) return;
  const base = b.type.split("/")[0] ?? "";
  if (!GANG_STUB_TYPES.includes(base))
    throw new BerthError(
      "invalid_request",
      `a ${b.type} stub cannot be a gang; nodes applies to functions, task queues and pods`,
      { field: "extra.nodes" },
    );
  const one = (field: string, value: number | undefined) => {
    if (value !== undefined && value > 1)
      throw new BerthError(
        "invalid_request",
        `a gang of ${nodes} nodes runs one task at a time; ${field} must be 1, got ${value}`,
        { field },
      );
  };
  one("config.workers", b.config.workers);
  one("config.autoscaler.tasks_per_container", b.config.autoscaler.tasks_per_container);
  one("extra.concurrent_requests", b.extra.concurrent_requests);
}

/** Stubs: get-or-create by (workspace, name, type). */
export function gatewayStubRoutes(tasks: TaskService): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/gateway/stubs",
      {
        config: { access: { needs: "write" } },
        schema: {
          summary:
            "Registers a stub (what a function, deployment or sandbox runs), or updates the one of that name and type; answers it",
          body: Type.Object(
            {
              name: Type.String({ minLength: 1, maxLength: 200 }),
              type: Type.String({ pattern: STUB_TYPE_PATTERN }),
              config: StubConfigOrNoHandlerSchema,
              extra: StubExtraSchema,
            },
            { additionalProperties: false },
          ),
          response: gatewayResponse(Type.Object({ ok: Type.Literal(true), stub: StubBody })),
        },
      },
      async (req) => {
        const b = req.body as { name: string; type: string; config: StubConfig; extra: StubExtra };
        if (b.config.handler === "" && !["sandbox", "pod"].includes(b.type.split("/")[0] ?? "")) {
          throw new BerthError("invalid_request", `a ${b.type} stub needs a handler (module:function)`, {
            field: "config.handler",
          });
        }
        // Only runner containers are preempted (their tasks requeue); a sandbox or pod never is.
        if (b.extra.preemptible && ["sandbox", "pod"].includes(b.type.split("/")[0] ?? "")) {
          throw new BerthError(
            "invalid_request",
            `a ${b.type} is never preempted; preemptible applies to functions, task queues and deployments`,
            { field: "extra.preemptible" },
          );
        }
        checkGangNodes(b);
        // Volumes are checked when registered too: a bad name never reaches an agent.
        checkStubVolumes(b.config.volumes);
        // A bad egress combination is refused when registered, before any container starts.
        if (b.extra.block_network !== undefined || b.extra.allow_list !== undefined) {
          resolveEgressPolicy({
            block_network: b.extra.block_network ?? false,
            allow_list: b.extra.allow_list ?? null,
          });
        }
        const { stub } = await tasks.upsertStub(principalOf(req).workspace.id, b);
        return { ok: true as const, stub: stubJson(stub) };
      },
    );

    app.get(
      "/api/v1/gateway/stubs/:stubId",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "One stub of the workspace",
          params: Type.Object({ stubId: Type.String() }),
          response: gatewayResponse(Type.Object({ ok: Type.Literal(true), stub: StubBody })),
        },
      },
      async (req) => {
        const { stubId } = req.params as { stubId: string };
        return {
          ok: true as const,
          stub: stubJson(await tasks.getStub(principalOf(req).workspace.id, stubId)),
        };
      },
    );
  };
}
