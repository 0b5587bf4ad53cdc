import { PassThrough } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyReply } from "fastify";
import { TERMINAL_STATUSES, type TaskError } from "../../shared/tasks.ts";
import type { TaskRecord } from "./store.ts";
import type { TaskService, TaskUpdate } from "./service.ts";
import { principalOf } from "../http/index.ts";
import { publicError } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";

/** Pickled inputs of up to 4 MiB each, base64: a few dozen large ones or many small ones. */
export const TASKS_BODY_LIMIT = 64 * 1024 * 1024;
const MAX_WAIT_S = 300;

const TaskErrorSchema = Type.Object({
  type: Type.String(),
  message: Type.String(),
  traceback: Type.String(),
  pickled: Type.Optional(Type.String()),
});

const ResultBody = Type.Object({
  ok: Type.Literal(true),
  task_id: Type.String(),
  status: Type.String(),
  result: Type.Optional(Type.String({ description: "base64 pickle of the return value" })),
  error: Type.Optional(TaskErrorSchema),
});

interface SubmitBody {
  inputs: string[];
  headless?: boolean;
  callback_url?: string;
  stream?: boolean;
}

function resultJson(t: TaskRecord) {
  return {
    ok: true as const,
    task_id: t.id,
    status: t.status,
    ...(t.result && t.status === "COMPLETE" ? { result: t.result.toString("base64") } : {}),
    ...(t.error && t.status !== "COMPLETE" ? { error: t.error } : {}),
  };
}

/** One NDJSON line per update, as docs/tasks.md lists them. */
function ndjsonLine(u: TaskUpdate, index: number): string | undefined {
  const base = { index, task_id: u.taskId };
  if (u.type === "output")
    return JSON.stringify({ event: "output", ...base, stream: u.stream, data: u.data });
  if (u.type === "status") return JSON.stringify({ event: "status", ...base, status: u.status });
  const error: TaskError | undefined = u.status === "COMPLETE" ? undefined : (u.error ?? undefined);
  return JSON.stringify({
    event: "result",
    ...base,
    status: u.status,
    ...(u.status === "COMPLETE" ? { result: u.result ?? "" } : {}),
    ...(error ? { error } : {}),
  });
}

/**
 * Streams a submission: the tasks' ids, then their output, status changes and
 * results; cancels the unfinished non-headless tasks when the client leaves early.
 */
function streamSubmission(
  tasks: TaskService,
  reply: FastifyReply,
  wsId: string,
  stubId: string,
  b: SubmitBody,
  tokenId: string,
) {
  const out = new PassThrough();
  const indexOf = new Map<string, number>();
  const unfinished = new Set<string>();
  let unwatch: (() => void) | undefined;
  let ended = false;
  const write = (line: string) => {
    if (!ended) out.write(`${line}\n`);
  };
  const end = () => {
    if (ended) return;
    ended = true;
    unwatch?.();
    out.end();
  };
  const onUpdate = (u: TaskUpdate) => {
    const i = indexOf.get(u.taskId);
    if (i === undefined) return;
    const line = ndjsonLine(u, i);
    if (line) write(line);
    if (u.type === "result" && TERMINAL_STATUSES.has(u.status)) {
      unfinished.delete(u.taskId);
      if (unfinished.size === 0) end();
    }
  };
  reply.raw.on("close", () => {
    if (!ended && unfinished.size > 0) tasks.cancelAbandoned(unfinished);
    end();
  });
  reply.type("application/x-ndjson").send(out);

  void (async () => {
    try {
      const inputs = b.inputs.map((s) => Buffer.from(s, "base64"));
      await tasks.submit(wsId, stubId, inputs, {
        ...(b.headless !== undefined ? { headless: b.headless } : {}),
        ...(b.callback_url ? { callbackUrl: b.callback_url } : {}),
        tokenId,
        // Runs before any message is published, so no update can be missed.
        onCreated: (created) => {
          unwatch = tasks.watch(created, onUpdate);
          if (ended) unwatch();
          created.forEach((id, i) => {
            indexOf.set(id, i);
            unfinished.add(id);
            write(JSON.stringify({ event: "task", index: i, task_id: id }));
          });
        },
      });
    } catch (e) {
      const { error } = publicError(e, { log: reply.log, what: "task submission failed" });
      write(JSON.stringify({ event: "error", error: { code: error.code, message: error.message } }));
      end();
    }
  })();
  return reply;
}

/** Task submission, results and cancel for the SDK. */
export function gatewayTaskRoutes(tasks: TaskService): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/gateway/stubs/:stubId/tasks",
      {
        config: { access: { needs: "invoke" } },
        bodyLimit: TASKS_BODY_LIMIT,
        schema: {
          summary:
            "Submits one task per pickled input; answers their ids (with stream, their output and results as NDJSON)",
          params: Type.Object({ stubId: Type.String() }),
          body: Type.Object(
            {
              inputs: Type.Array(Type.String(), { minItems: 1 }),
              headless: Type.Optional(Type.Boolean()),
              callback_url: Type.Optional(Type.String({ maxLength: 2048 })),
              stream: Type.Optional(Type.Boolean()),
            },
            { additionalProperties: false },
          ),
          response: gatewayResponse(
            Type.Object({ ok: Type.Literal(true), task_ids: Type.Array(Type.String()) }),
          ),
        },
      },
      async (req, reply) => {
        const { stubId } = req.params as { stubId: string };
        const b = req.body as SubmitBody;
        const wsId = principalOf(req).workspace.id;
        if (b.stream) return streamSubmission(tasks, reply, wsId, stubId, b, principalOf(req).token.id);
        const ids = await tasks.submit(
          wsId,
          stubId,
          b.inputs.map((s) => Buffer.from(s, "base64")),
          {
            ...(b.headless !== undefined ? { headless: b.headless } : {}),
            ...(b.callback_url ? { callbackUrl: b.callback_url } : {}),
            tokenId: principalOf(req).token.id,
          },
        );
        return { ok: true as const, task_ids: ids };
      },
    );

    app.get(
      "/api/v1/gateway/tasks/:taskId/result",
      {
        config: { access: { needs: "invoke" } },
        schema: {
          summary:
            "A task's status and its pickled result or error; with wait, once it ends or timeout_s passes",
          params: Type.Object({ taskId: Type.String() }),
          querystring: Type.Object({
            wait: Type.Optional(
              Type.Union([Type.Literal("0"), Type.Literal("1"), Type.Literal("true"), Type.Literal("false")]),
            ),
            timeout_s: Type.Optional(Type.Number({ minimum: 0, maximum: MAX_WAIT_S })),
          }),
          response: gatewayResponse(ResultBody),
        },
      },
      async (req) => {
        const { taskId } = req.params as { taskId: string };
        const q = req.query as { wait?: string; timeout_s?: number };
        const wsId = principalOf(req).workspace.id;
        const wait = q.wait === "1" || q.wait === "true";
        const t = wait
          ? await tasks.waitResult(wsId, taskId, (q.timeout_s ?? 30) * 1000)
          : await tasks.getTask(wsId, taskId);
        return resultJson(t);
      },
    );

    app.post(
      "/api/v1/gateway/tasks/:taskId/cancel",
      {
        config: { access: { needs: "invoke" } },
        schema: {
          summary: "Cancels a task; answers its status",
          params: Type.Object({ taskId: Type.String() }),
          response: gatewayResponse(
            Type.Object({ ok: Type.Literal(true), task_id: Type.String(), status: Type.String() }),
          ),
        },
      },
      async (req) => {
        const { taskId } = req.params as { taskId: string };
        const r = await tasks.cancel(principalOf(req).workspace.id, taskId);
        return { ok: true as const, task_id: r.taskId, status: r.status };
      },
    );
  };
}
