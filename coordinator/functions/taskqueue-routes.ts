import { Type } from "@sinclair/typebox";
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { BerthError, invalid } from "../../shared/errors.ts";
import { baseStubType } from "../../shared/tasks.ts";
import { checkBody, describeBodyMismatch } from "../endpoints/index.ts";
import type { DeploymentService, Resolved } from "../deployments/index.ts";
import type { StubRecord } from "../tasks/index.ts";
import type { TokenRepo } from "../store/index.ts";
import type { TaskService } from "../tasks/index.ts";
import { allowDeployment, authenticator, principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";

// Task queues: `TaskQueue.put()` through the gateway (pickled arguments), and
// `POST {base_url}/taskqueue/{name}[/v{N}]` or `/taskqueue/id/{id}` with a
// JSON object bound to the handler's parameters. Either way the task runs
// queued, like a function's (docs/tasks.md).

export interface TaskQueueRouteDeps {
  tokens: TokenRepo;
  deployments: DeploymentService;
  tasks: Pick<TaskService, "submit" | "getStub" | "queueDepth">;
}

const enc = new TextEncoder();

/** Refuses a task beyond the stub's max_pending_tasks (429). */
function checkPending(tasks: TaskQueueRouteDeps["tasks"], stub: StubRecord, what: string): void {
  const max = stub.config.max_pending_tasks;
  const waiting = tasks.queueDepth(stub.id);
  if (max > 0 && waiting >= max)
    throw new BerthError(
      "resource_exhausted",
      `${what} has ${waiting} tasks waiting, its max_pending_tasks is ${max}: try again later`,
      { queue_depth: waiting, max_pending_tasks: max },
    );
}

const describeJsonType = (v: unknown) =>
  v === null ? "null" : Array.isArray(v) ? "an array" : `a ${typeof v}`;

/**
 * `/taskqueue/{name}`: public or token-checked per deployment (it checks the
 * token itself), so it is registered outside the API's scopes.
 */
export function taskQueueRoutes(d: TaskQueueRouteDeps): FastifyPluginAsync {
  return publicTaskQueue(d);
}

/** `POST /api/v1/gateway/stubs/{id}/enqueue`: registered in the gateway scope (coordinator/http/scopes.ts). */
export function gatewayEnqueueRoutes(d: Pick<TaskQueueRouteDeps, "tasks">): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/gateway/stubs/:stubId/enqueue",
      {
        config: { access: { needs: "invoke" } },
        schema: {
          summary: "Queues a task on a task queue stub (TaskQueue.put()); answers its task id",
          params: Type.Object({ stubId: Type.String() }),
          body: Type.Object(
            { args: Type.String({ description: "base64 of the pickled (args, kwargs)" }) },
            { additionalProperties: false },
          ),
          response: gatewayResponse(Type.Object({ ok: Type.Literal(true), task_id: Type.String() })),
        },
      },
      async (req) => {
        const ws = principalOf(req).workspace.id;
        const { stubId } = req.params as { stubId: string };
        const { args } = req.body as { args: string };
        const stub = await d.tasks.getStub(ws, stubId);
        if (baseStubType(stub.type) !== "taskqueue")
          throw invalid(
            `stub ${stubId} is a ${baseStubType(stub.type)}, not a task queue: only task queues take put()`,
          );
        checkPending(d.tasks, stub, `task queue ${stub.name}`);
        const [taskId] = await d.tasks.submit(ws, stubId, [Buffer.from(args, "base64")], {
          tokenId: principalOf(req).token.id,
        });
        return { ok: true as const, task_id: taskId as string };
      },
    );
  };
}

const TaskIdBody = Type.Object({ task_id: Type.String() });
const publicErrors = {
  400: ErrorResponse,
  401: ErrorResponse,
  404: ErrorResponse,
  409: ErrorResponse,
  429: ErrorResponse,
};
const JsonObjectBody = Type.Any({ description: "a JSON object: the handler's arguments by name" });

function publicTaskQueue(d: TaskQueueRouteDeps): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    const authenticate = authenticator(d.tokens);
    // `curl -d` sends form encoding: every body of these routes is read as JSON
    // (application/json keeps Fastify's own parser).
    app.removeContentTypeParser("text/plain");
    app.addContentTypeParser("*", { parseAs: "string" }, (_req, body, done) => {
      const text = String(body);
      if (text.trim() === "") return done(null, undefined);
      try {
        done(null, JSON.parse(text));
      } catch (e) {
        done(
          new BerthError("invalid_json", `the request body is not valid JSON: ${(e as Error).message}`),
          undefined,
        );
      }
    });

    const enqueue = async (req: FastifyRequest, reply: FastifyReply, r: Resolved) => {
      const { deployment, stub } = r;
      if (deployment.kind !== "taskqueue")
        throw new BerthError(
          "not_found",
          `deployment ${deployment.name} is a ${deployment.kind}, not a task queue${deployment.kind === "schedule" || deployment.kind === "function" ? "" : ": call it under /endpoint/"}`,
        );
      const body = req.body;
      if (body === null || typeof body !== "object" || Array.isArray(body))
        throw invalid(
          `the request body must be a JSON object (the handler's arguments by name), got ${body === undefined ? "nothing" : describeJsonType(body)}`,
        );
      const fields = body as Record<string, unknown>;
      const params = deployment.extra.handler_params;
      if (params) {
        const mismatch = checkBody(params, fields);
        if (mismatch.unknown.length || mismatch.missing.length)
          throw invalid(describeBodyMismatch(mismatch), {
            unknown: mismatch.unknown,
            missing: mismatch.missing,
          });
      }
      const callbackUrl = fields.callback_url;
      if (
        callbackUrl !== undefined &&
        (typeof callbackUrl !== "string" || !/^https?:\/\/\S+$/.test(callbackUrl))
      )
        throw invalid("callback_url must be an http or https URL");
      checkPending(d.tasks, stub, `task queue ${deployment.name}`);
      const [taskId] = await d.tasks.submit(
        deployment.workspaceId,
        stub.id,
        [enc.encode(JSON.stringify(fields))],
        {
          payloadFormat: "json",
          ...(callbackUrl ? { callbackUrl } : {}),
          // A public deployment's caller sends no token.
          tokenId: req.principal?.token.id ?? null,
        },
      );
      void d.deployments.noteRequest(deployment.id);
      reply.header("X-Task-Id", taskId);
      return { task_id: taskId as string };
    };

    const schema = (summary: string, params: ReturnType<typeof Type.Object>) => ({
      summary,
      params,
      body: JsonObjectBody,
      response: { 200: TaskIdBody, ...publicErrors },
    });

    // By id: open to anyone when the deployment is not authorized, else its workspace's tokens only.
    app.post(
      "/taskqueue/id/:id",
      {
        config: { access: { needs: "invoke", deployment: "by-handler" } },
        schema: schema(
          "Queues a task on the task queue deployment with this id, the JSON body its arguments; answers its task id",
          Type.Object({ id: Type.String() }),
        ),
      },
      async (req, reply) => {
        const { id } = req.params as { id: string };
        // Stopped ones too: whether it is stopped is told only to whom may call it (below).
        const r = await d.deployments.resolveById(id, { includeStopped: true });
        if (r.deployment.config.authorized) {
          await authenticate(req, reply);
          if (principalOf(req).workspace.id !== r.deployment.workspaceId)
            throw new BerthError("not_found", `deployment ${id} not found`);
          allowDeployment(principalOf(req), r.deployment.name);
        }
        if (!r.deployment.active) {
          throw new BerthError(
            "deployment_stopped",
            `deployment ${r.deployment.name} (${id}) is stopped: start it`,
            {
              deployment_id: id,
            },
          );
        }
        return enqueue(req, reply, r);
      },
    );

    const byName = async (req: FastifyRequest, reply: FastifyReply, name: string, version?: number) => {
      const r = await d.deployments.resolveByName(principalOf(req).workspace.id, name, version);
      return enqueue(req, reply, r);
    };

    app.post(
      "/taskqueue/:name",
      {
        config: { access: { needs: "invoke", deployment: "name" } },
        onRequest: authenticate,
        schema: schema(
          "Queues a task on the task queue deployment's latest active version, the JSON body its arguments; answers its task id",
          Type.Object({ name: Type.String() }),
        ),
      },
      async (req, reply) => byName(req, reply, (req.params as { name: string }).name),
    );

    app.post(
      "/taskqueue/:name/:version",
      {
        config: { access: { needs: "invoke", deployment: "name" } },
        onRequest: authenticate,
        schema: schema(
          "Queues a task on one version (v1, v2, ...) of the task queue deployment; answers its task id",
          Type.Object({ name: Type.String(), version: Type.String() }),
        ),
      },
      async (req, reply) => {
        const { name, version } = req.params as { name: string; version: string };
        const m = /^v([1-9][0-9]{0,8})$/.exec(version);
        if (!m)
          throw new BerthError(
            "route_not_found",
            `no route POST ${req.url.split("?")[0]}: a version is v1, v2, ...`,
          );
        return byName(req, reply, name, Number(m[1]));
      },
    );
  };
}
