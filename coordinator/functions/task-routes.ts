// `/api/v1/task/{ws}` (docs/api.md "Tasks"): the workspace's tasks, a page
// at a time with filters; one task with its status history and cost; and a
// task's status changes as server-sent events until it ends.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { TASK_STATUSES, type TaskStatus } from "../../shared/tasks.ts";
import type { DeploymentService } from "../deployments/index.ts";
import type { StubRecord } from "../tasks/index.ts";
import type { TaskListFilter, TaskRepo } from "../tasks/index.ts";
import { type CostRates, ZERO_COST_RATES } from "../tasks/index.ts";
import type { TaskService, TaskUpdate } from "../tasks/index.ts";
import { isTerminal } from "../tasks/index.ts";
import { NextCursor, pageOf, pageQuery, pageRequest } from "../http/index.ts";
import { openSse, type SseStream } from "../http/index.ts";
import { TaskBody, TaskCostBody, type TaskOutputs, taskCost, taskJson } from "../tasks/index.ts";
import { isoQueryTime, scopedWorkspace, WorkspaceErrors, WsParams } from "../http/index.ts";

/** Keep-alive comments on the subscribe stream (proxies close silent connections). */
export const SUBSCRIBE_HEARTBEAT_MS = 15_000;
/**
 * How often the subscribe stream re-reads the task: another coordinator may
 * be the one applying its events, and this one's watchers hear only its own.
 */
export const SUBSCRIBE_POLL_MS = 2000;

export interface TaskRouteDeps {
  tasks: TaskService;
  /** The store's task rows (the list reads them). */
  rows: Pick<TaskRepo, "list">;
  /** The deployment_id filter needs it; without, that filter is refused. */
  deployments?: Pick<DeploymentService, "get">;
  costRates?: CostRates;
  /** @default SUBSCRIBE_HEARTBEAT_MS */
  heartbeatMs?: number;
  /** @default SUBSCRIBE_POLL_MS */
  pollMs?: number;
  /** The task record's `outputs` (docs/outputs.md); [] without. */
  outputs?: TaskOutputs;
}

const Status = Type.Union(
  TASK_STATUSES.map((s) => Type.Literal(s)),
  { description: "a task status" },
);

const TaskListQuery = pageQuery({
  status: Type.Optional(
    Type.Array(Status, {
      description: "repeat (status=RUNNING&status=PENDING) for any of several",
      maxItems: 8,
    }),
  ),
  stub_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  deployment_id: Type.Optional(
    Type.String({ minLength: 1, maxLength: 200, description: "tasks of its stub" }),
  ),
  created_after: Type.Optional(Type.String({ description: "ISO 8601: created strictly after" })),
  created_before: Type.Optional(Type.String({ description: "ISO 8601: created strictly before" })),
});

export const TaskSummaryBody = Type.Object({
  id: Type.String(),
  status: Status,
  attempt: Type.Integer(),
  stub: Type.Object({ id: Type.String(), name: Type.String(), type: Type.String() }),
  container_id: Type.String({ description: "empty until a container took it" }),
  created_at: Type.String({ format: "date-time" }),
  started_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
  ended_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
  updated_at: Type.String({ format: "date-time" }),
  cost: Type.Union([TaskCostBody, Type.Null()]),
});

const HistoryEntry = Type.Object({
  status: Type.String(),
  attempt: Type.Integer(),
  container_id: Type.Union([Type.String(), Type.Null()]),
  reason: Type.Union([Type.String(), Type.Null()]),
  at: Type.String(),
});

/** Why a PENDING or RETRY task waits (docs/tasks.md "Why a task waits"); null once it does not. */
const WaitingBody = Type.Object(
  {
    kind: Type.Union(
      ["queued", "no_room", "no_agent", "workspace_limit", "start_backoff", "container_starting"].map((k) =>
        Type.Literal(k),
      ),
    ),
    message: Type.String({ description: "the planner's reason: resource, GPU type and count, hosts" }),
    position: Type.Integer({ description: "1-based place among the stub's waiting tasks" }),
    ahead: Type.Integer(),
    waiting: Type.Integer({ description: "the stub's waiting tasks in all" }),
    containers: Type.Integer({ description: "the stub's containers running or starting" }),
    limit: Type.Optional(Type.String({ description: "the workspace limit (workspace_limit only)" })),
    since: Type.Optional(Type.String({ format: "date-time" })),
  },
  { description: "why the task waits for a container" },
);

const TaskDetails = Type.Composite([
  TaskBody,
  Type.Object({
    cost: Type.Union([TaskCostBody, Type.Null()]),
    history: Type.Array(HistoryEntry),
    waiting: Type.Union([WaitingBody, Type.Null()]),
  }),
]);
const TaskIdParams = Type.Object({ ws: Type.String(), taskId: Type.String() });

const LIST = "tasks";

export function taskRoutes(d: TaskRouteDeps): FastifyPluginAsync {
  const rates = d.costRates ?? ZERO_COST_RATES;
  const heartbeatMs = d.heartbeatMs ?? SUBSCRIBE_HEARTBEAT_MS;
  const pollMs = d.pollMs ?? SUBSCRIBE_POLL_MS;
  const { tasks } = d;
  return async (app) => {
    app.get(
      "/api/v1/task/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["tasks"],
          summary: "The workspace's tasks, newest first",
          params: WsParams,
          querystring: TaskListQuery,
          response: {
            200: Type.Object({ tasks: Type.Array(TaskSummaryBody), next_cursor: NextCursor }),
            ...WorkspaceErrors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const q = req.query as {
          status?: TaskStatus[];
          stub_id?: string;
          deployment_id?: string;
          created_after?: string;
          created_before?: string;
          limit?: number;
          cursor?: string;
        };
        const page = pageRequest(LIST, q, 2);
        const filter: TaskListFilter = {};
        if (q.status) filter.statuses = [...new Set(q.status)];
        const createdAfter = isoQueryTime("created_after", q.created_after);
        const createdBefore = isoQueryTime("created_before", q.created_before);
        if (createdAfter) filter.createdAfter = createdAfter;
        if (createdBefore) filter.createdBefore = createdBefore;
        let stubIds: string[] | undefined = q.stub_id === undefined ? undefined : [q.stub_id];
        if (q.deployment_id !== undefined) {
          if (!d.deployments) {
            throw new BerthError(
              "invalid_request",
              "deployment_id: this coordinator runs no deployment service",
            );
          }
          const dep = await d.deployments.get(ws.id, q.deployment_id);
          stubIds = stubIds ? stubIds.filter((s) => s === dep.stubId) : [dep.stubId];
        }
        if (stubIds) filter.stubIds = stubIds;
        const after = page.after
          ? { createdAt: String(page.after[0]), id: String(page.after[1]) }
          : undefined;
        const rows = await d.rows.list(ws.id, filter, { limit: page.limit + 1, ...(after ? { after } : {}) });
        const { items, next_cursor } = pageOf(LIST, rows, page.limit, (t) => [t.createdAt, t.id]);
        const stubs = new Map<string, StubRecord>();
        const out = [];
        for (const t of items) {
          let stub = stubs.get(t.stubId);
          if (!stub) {
            stub = await tasks.getStub(ws.id, t.stubId);
            stubs.set(t.stubId, stub);
          }
          out.push({
            id: t.id,
            status: t.status,
            attempt: t.attempt,
            stub: { id: stub.id, name: stub.name, type: stub.type },
            container_id: t.containerId ?? "",
            created_at: t.createdAt,
            started_at: t.startedAt,
            ended_at: t.endedAt,
            updated_at: t.updatedAt,
            cost: taskCost(t, stub, rates),
          });
        }
        return { tasks: out, next_cursor };
      },
    );

    app.get(
      "/api/v1/task/:ws/:taskId",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["tasks"],
          summary: "One task: the Task object of the task status API, its cost, status history and why it waits",
          params: TaskIdParams,
          response: { 200: TaskDetails, ...WorkspaceErrors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const { taskId } = req.params as { taskId: string };
        // History first: it reads committed rows, the task its newer live state, so the
        // answer never shows a status older than its own history.
        const committed = await tasks.history(ws.id, taskId);
        const t = await tasks.getTask(ws.id, taskId);
        const history = committed.map((h) => ({
          status: h.status,
          attempt: h.attempt,
          container_id: h.containerId,
          reason: h.reason,
          at: h.at,
        }));
        const { json, stub } = await taskJson(tasks, ws.id, t, d.outputs);
        return { ...json, cost: taskCost(t, stub, rates), history, waiting: tasks.waiting(t) ?? null };
      },
    );

    app.get(
      "/api/v1/task/:ws/:taskId/subscribe",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["tasks"],
          summary: "The task's status changes as server-sent events, until it ends",
          params: TaskIdParams,
          response: {
            200: Type.String({
              description:
                "text/event-stream: one `event: status` per change, data {task_id, status, attempt, at}; the stream ends after a terminal status",
            }),
            ...WorkspaceErrors,
          },
        },
      },
      async (req, reply) => {
        const ws = scopedWorkspace(req);
        const { taskId } = req.params as { taskId: string };
        let last: TaskStatus | undefined;
        let attempt = 0;
        let poll: NodeJS.Timeout | undefined;
        let sse: SseStream | undefined;
        // Changes heard before the stream opens are sent first, in order, once it does.
        const early: Array<[TaskStatus, string, number | undefined]> = [];
        const send = (status: TaskStatus, at: string, atAttempt?: number) => {
          if (!sse) return void early.push([status, at, atAttempt]);
          attempt = Math.max(attempt, atAttempt ?? attempt);
          if (sse.ended || status === last) return;
          last = status;
          sse.send({ event: "status", data: { task_id: taskId, status, attempt, at } });
          if (isTerminal(status)) sse.end();
        };
        const onUpdate = (u: TaskUpdate) => {
          if (u.type === "status") send(u.status, new Date().toISOString(), u.attempt);
          else if (u.type === "result") send(u.status, new Date().toISOString());
        };
        // Watching before the first read: a change between the two is not missed.
        const unwatch = tasks.watch([taskId], onUpdate);
        let first: Awaited<ReturnType<TaskService["getTask"]>>;
        try {
          first = await tasks.getTask(ws.id, taskId);
        } catch (e) {
          unwatch();
          throw e;
        }
        const reread = async () => {
          try {
            const t = await tasks.getTask(ws.id, taskId);
            send(t.status, t.updatedAt, t.attempt);
          } catch (e) {
            req.log.warn({ err: (e as Error).message, taskId }, "task subscribe: re-reading the task failed");
          }
        };
        sse = openSse(reply, {
          heartbeatMs,
          greeting: "subscribed",
          onEnd: () => {
            clearInterval(poll);
            unwatch();
          },
        });
        for (const [status, at, atAttempt] of early) send(status, at, atAttempt);
        send(first.status, first.updatedAt, first.attempt);
        if (!sse.ended) poll = setInterval(() => void reread(), pollMs);
        return reply;
      },
    );
  };
}
