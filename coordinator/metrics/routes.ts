import { type TSchema, Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import {
  MAX_BUCKETS,
  parseRange,
  poolTimeseries,
  type RangeQuery,
  response,
  stubTimeseries,
  workspaceTimeseries,
} from "./index.ts";
import type { MetricsRepo } from "./store.ts";
import type { StubRepo } from "../tasks/index.ts";
import { scopedWorkspace, WorkspaceErrors as errors, WsParams } from "../http/index.ts";

// `/api/v1/metrics/{ws}/...`: time series of the workspace's containers and
// tasks, one stub's, and the pools' capacity vs use (docs/metrics.md).

export interface MetricsRouteDeps {
  metrics: MetricsRepo;
  stubs: Pick<StubRepo, "get">;
  /**
   * The pools a workspace may run in. Nothing restricts pools per workspace
   * yet, so by default every pool with samples in the range.
   */
  poolsOf?: (workspaceId: string) => Promise<string[] | undefined>;
  clock?: () => number;
}

const RangeFields = {
  from: Type.Optional(Type.String({ description: "ISO 8601 time or unix seconds; default to - 1 hour" })),
  to: Type.Optional(Type.String({ description: "ISO 8601 time or unix seconds; default now" })),
  step: Type.Optional(
    Type.String({
      description: `bucket width: seconds, or 30s, 5m, 1h, 1d; default 60; at most ${MAX_BUCKETS} buckets`,
    }),
  ),
};

// type: [number, null] rather than anyOf: the response serializer handles it in tuples.
const Value = Type.Unsafe<number | null>({ type: ["number", "null"] });
const Point = Type.Tuple([Type.String({ format: "date-time" }), Value], {
  description: "[bucket start, value]; null where a gauge has no sample in the bucket",
});

export const TimeseriesBody = Type.Object({
  from: Type.String({
    format: "date-time",
    description: "start of the first bucket (from moved back to a multiple of step)",
  }),
  to: Type.String({ format: "date-time" }),
  step_seconds: Type.Integer(),
  series: Type.Array(
    Type.Object({
      name: Type.String(),
      unit: Type.String({ description: "count, cores, bytes, percent or ms" }),
      labels: Type.Optional(Type.Record(Type.String(), Type.String())),
      points: Type.Array(Point),
    }),
  ),
});

/** The three routes differ only in their summary and query. */
const timeseriesSchema = (summary: string, querystring: TSchema) => ({
  schema: {
    tags: ["metrics"],
    summary,
    params: WsParams,
    querystring,
    response: { 200: TimeseriesBody, ...errors },
  },
});

export function metricsRoutes(d: MetricsRouteDeps): FastifyPluginAsync {
  const now = d.clock ?? Date.now;
  return async (app) => {
    app.get(
      "/api/v1/metrics/:ws/stub-timeseries",
      {
        config: { access: { needs: "read" } },
        ...timeseriesSchema(
          "One stub: containers, CPU, memory, GPU, tasks by status and task run times",
          Type.Object({ stub_id: Type.String({ minLength: 1 }), ...RangeFields }),
        ),
      },
      async (req) => {
        const workspaceId = scopedWorkspace(req).id;
        const q = req.query as RangeQuery & { stub_id: string };
        const range = parseRange(q, now());
        const stub = await d.stubs.get(q.stub_id);
        if (!stub || stub.workspaceId !== workspaceId)
          throw new BerthError("not_found", `stub ${q.stub_id} not found`);
        return response(range, await stubTimeseries(d.metrics, { workspaceId, stubId: stub.id }, range));
      },
    );

    app.get(
      "/api/v1/metrics/:ws/workspace-timeseries",
      {
        config: { access: { needs: "read" } },
        ...timeseriesSchema(
          "The workspace's totals: containers, CPU, memory, GPU and tasks by status",
          Type.Object(RangeFields),
        ),
      },
      async (req) => {
        const workspaceId = scopedWorkspace(req).id;
        const range = parseRange(req.query as RangeQuery, now());
        return response(range, await workspaceTimeseries(d.metrics, workspaceId, range));
      },
    );

    app.get(
      "/api/v1/metrics/:ws/pool-timeseries",
      {
        config: { access: { needs: "read" } },
        ...timeseriesSchema(
          "Capacity, allocation and use of the pools this workspace can run in",
          Type.Object(RangeFields),
        ),
      },
      async (req) => {
        const workspaceId = scopedWorkspace(req).id;
        const range = parseRange(req.query as RangeQuery, now());
        const pools = await d.poolsOf?.(workspaceId);
        return response(range, await poolTimeseries(d.metrics, range, pools));
      },
    );
  };
}
