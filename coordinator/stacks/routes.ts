// `/api/v1/stack/...` (docs/stacks.md): a workspace's stacks. POST makes one
// and applies it, PUT applies a new version of every member at once; both
// answer when the attempt has ended, ready or rolled back (the record says
// which, and for a rollback which member failed and why), or with ?wait=false
// at once (202, the attempt applying) for the caller to follow with GET.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import type { MemberOutcome } from "./members.ts";
import type { StackService, StackVersion, StackView } from "./service.ts";
import { scopedWorkspace, WorkspaceErrors, WsParams } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";
import { StubConfigSchema, StubExtraSchema } from "../functions/index.ts";

const MemberBody = Type.Object(
  {
    kind: Type.String({ description: "deployment, or database where the coordinator has databases" }),
    name: Type.String({ description: "the deployment's (database's) name; unique per kind in the stack" }),
    // A deployment member's fields, as `POST /api/v1/gateway/deployments` takes them; other kinds add their own.
    type: Type.Optional(
      Type.String({
        description: "deployment kind: endpoint, asgi, realtime, taskqueue, schedule, function, pod",
      }),
    ),
    config: Type.Optional(StubConfigSchema),
    extra: Type.Optional(StubExtraSchema),
  },
  { additionalProperties: true },
);

const ApplyFields = {
  members: Type.Array(MemberBody, { minItems: 1, maxItems: 50 }),
  ready_timeout_s: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: 3600,
      description: "how long the attempt waits for its members to be ready; default 300",
    }),
  ),
};

const MemberJson = Type.Object({
  name: Type.String(),
  kind: Type.String(),
  action: Type.String({
    description: "deploy (a new version), keep (unchanged: the live one), remove (left the stack)",
  }),
  id: Type.Union([Type.String(), Type.Null()], {
    description: "the deployment (database) id of this version",
  }),
  version: Type.Union([Type.Integer(), Type.Null()]),
  previous: Type.Union([
    Type.Object({ id: Type.String(), version: Type.Union([Type.Integer(), Type.Null()]) }),
    Type.Null(),
  ]),
  state: Type.String({ description: "pending, ready, failed, rolled_back, removed or skipped" }),
  reason: Type.Optional(Type.String()),
});

const VersionJson = Type.Object({
  version: Type.Integer(),
  status: Type.String({ description: "applying, ready, rolled_back or abandoned" }),
  members: Type.Array(MemberJson),
  failure: Type.Union([Type.Object({ member: Type.String(), reason: Type.String() }), Type.Null()]),
  ready_timeout_s: Type.Integer(),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const StackJson = Type.Object({
  id: Type.String(),
  name: Type.String(),
  current_version: Type.Integer({ description: "the live version; 0 before one was ready" }),
  applying_version: Type.Union([Type.Integer(), Type.Null()]),
  current: Type.Union([VersionJson, Type.Null()]),
  latest: Type.Union([VersionJson, Type.Null()], { description: "the newest attempt" }),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const memberJson = (o: MemberOutcome) => ({
  name: o.name,
  kind: o.kind,
  action: o.action,
  id: o.ref,
  version: o.version,
  previous: o.previous ? { id: o.previous.ref, version: o.previous.version } : null,
  state: o.state,
  ...(o.reason ? { reason: o.reason } : {}),
});

const versionJson = (v: StackVersion | null) =>
  v && {
    version: v.version,
    status: v.status,
    members: v.members.map(memberJson),
    failure: v.failure,
    ready_timeout_s: v.spec.ready_timeout_s,
    created_at: v.createdAt,
    updated_at: v.updatedAt,
  };

export const stackJson = (s: StackView) => ({
  id: s.stack.id,
  name: s.stack.name,
  current_version: s.stack.currentVersion,
  applying_version: s.stack.applyingVersion,
  current: versionJson(s.current),
  latest: versionJson(s.latest),
  created_at: s.stack.createdAt,
  updated_at: s.stack.updatedAt,
});

const errors = { ...WorkspaceErrors, 409: ErrorResponse };
const WaitQuery = Type.Object({
  wait: Type.Optional(
    Type.Boolean({
      description:
        "false: answer 202 once the attempt is recorded (latest.status applying) and follow it with GET; default true: answer when it has ended",
    }),
  ),
});
const StackParams = Type.Object({ ws: Type.String(), stackId: Type.String() });

export function stackRoutes(stacks: StackService): FastifyPluginAsync {
  return async (app) => {
    // Before the body is validated: another workspace's stack (or `{ws}`) is 404 whatever the body says.
    const owned = async (req: FastifyRequest) => {
      const ws = scopedWorkspace(req);
      const { stackId } = req.params as { stackId?: string };
      if (stackId !== undefined) await stacks.get(ws.id, stackId);
    };

    app.get(
      "/api/v1/stack/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["stacks"],
          summary: "The workspace's stacks, each with its live version and newest attempt",
          params: WsParams,
          response: { 200: Type.Object({ stacks: Type.Array(StackJson) }), ...errors },
        },
      },
      async (req) => ({ stacks: (await stacks.list(scopedWorkspace(req).id)).map(stackJson) }),
    );

    app.post(
      "/api/v1/stack/:ws",
      {
        config: { access: { needs: "write", audit: "stack.create" } },
        preValidation: owned,
        schema: {
          tags: ["stacks"],
          summary:
            "Creates a stack and applies its members; answers when they are ready or rolled back (202 at once with wait=false)",
          params: WsParams,
          querystring: WaitQuery,
          body: Type.Object({ name: Type.String(), ...ApplyFields }, { additionalProperties: false }),
          response: { 201: StackJson, 202: StackJson, ...errors },
        },
      },
      async (req, reply) => {
        const ws = scopedWorkspace(req).id;
        const b = req.body as { name: string; members: unknown[]; ready_timeout_s?: number };
        const wait = (req.query as { wait?: boolean }).wait !== false;
        const view = await stacks.create(ws, b.name, b, { wait });
        return reply.status(wait ? 201 : 202).send(stackJson(view));
      },
    );

    app.put(
      "/api/v1/stack/:ws/:stackId",
      {
        config: { access: { needs: "write", audit: "stack.update" } },
        preValidation: owned,
        schema: {
          tags: ["stacks"],
          summary:
            "Applies a new version of every member of the stack at once; rolls all back when one fails",
          params: StackParams,
          querystring: WaitQuery,
          body: Type.Object(ApplyFields, { additionalProperties: false }),
          response: { 200: StackJson, 202: StackJson, ...errors },
        },
      },
      async (req, reply) => {
        const ws = scopedWorkspace(req).id;
        const { stackId } = req.params as { stackId: string };
        const wait = (req.query as { wait?: boolean }).wait !== false;
        const body = req.body as { members: unknown[]; ready_timeout_s?: number };
        const view = await stacks.update(ws, stackId, body, { wait });
        return reply.status(wait ? 200 : 202).send(stackJson(view));
      },
    );
  };
}
