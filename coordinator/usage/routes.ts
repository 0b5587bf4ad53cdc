// GET /api/v1/usage/{ws}/report (docs/usage.md): the workspace's usage in a window,
// by day, deployment and/or member; JSON, or CSV with `Accept: text/csv` or
// `?format=csv`. Any token that may read the workspace (viewer and up).

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { WorkspaceErrors, WsParams, scopedWorkspace } from "../http/index.ts";
import { usageCsv } from "./csv.ts";
import type { UsageService } from "./report.ts";
import { USAGE_DIMENSIONS, type UsageDimension } from "./tally.ts";

const DATE = /^\d{4}-\d{2}-\d{2}$/;
const ZONED = /^\d{4}-\d{2}-\d{2}T[0-9:.]+(Z|[+-]\d{2}:?\d{2})$/;
const DAY_MS = 86_400_000;

/**
 * A window bound: a date is that day's midnight UTC (for `to`, the midnight
 * after it, so the day is included); a time must say its zone.
 */
export function parseBound(name: "from" | "to", v: string): number {
  if (DATE.test(v)) {
    const ms = Date.parse(`${v}T00:00:00Z`);
    if (Number.isFinite(ms)) return name === "to" ? ms + DAY_MS : ms;
  } else if (ZONED.test(v)) {
    const ms = Date.parse(v);
    if (Number.isFinite(ms)) return ms;
  }
  throw new BerthError(
    "invalid_request",
    `${name} ${JSON.stringify(v)} is neither a date (YYYY-MM-DD) nor an ISO 8601 time with a zone (2026-12-01T08:00:00Z)`,
  );
}

export function parseBy(v: string | undefined): UsageDimension[] {
  if (v === undefined || v === "") return ["day"];
  const parts = v.split(",").map((s) => s.trim());
  const out: UsageDimension[] = [];
  for (const p of parts) {
    if (!(USAGE_DIMENSIONS as readonly string[]).includes(p))
      throw new BerthError(
        "invalid_request",
        `by ${JSON.stringify(p)} is not one of ${USAGE_DIMENSIONS.join(", ")}`,
      );
    if (!out.includes(p as UsageDimension)) out.push(p as UsageDimension);
  }
  return USAGE_DIMENSIONS.filter((d) => out.includes(d));
}

/** The first of this UTC month. */
const monthStart = (ms: number) => {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
};

const Seconds = (description: string) => Type.Number({ description });
export const UsageFiguresBody = Type.Object({
  tasks: Type.Integer({ description: "task runs that started in the row" }),
  sandboxes: Type.Integer({ description: "sandbox and pod containers that started in the row" }),
  run_seconds: Seconds("seconds containers ran the work"),
  cpu_seconds: Seconds("requested CPU cores times run seconds"),
  memory_gib_seconds: Seconds("requested memory in GiB times run seconds"),
  gpu_seconds: Seconds("requested GPUs times run seconds, all types"),
  gpu_seconds_by_type: Type.Record(Type.String(), Type.Number(), { description: "gpu_seconds by GPU type" }),
  inference_requests: Type.Integer({ description: "/v1 requests" }),
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
});

const Member = Type.Union([
  Type.Object({ id: Type.String({ description: "the token's id" }), name: Type.String() }),
  Type.Null(),
]);

export const UsageReportBody = Type.Object({
  workspace_id: Type.String(),
  from: Type.String({ format: "date-time" }),
  to: Type.String({ format: "date-time", description: "exclusive" }),
  by: Type.Array(Type.String()),
  totals: UsageFiguresBody,
  rows: Type.Array(
    Type.Object({
      day: Type.Optional(Type.String({ description: "YYYY-MM-DD, UTC" })),
      deployment: Type.Optional(Type.Union([Type.String(), Type.Null()])),
      member: Type.Optional(Member),
      usage: UsageFiguresBody,
    }),
  ),
  storage: Type.Object({
    at: Type.String({ format: "date-time" }),
    volume_bytes: Type.Integer(),
    object_bytes: Type.Integer(),
    snapshot_bytes: Type.Integer(),
  }),
});

export function usageRoutes(usage: UsageService): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/usage/:ws/report",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["usage"],
          summary:
            "The workspace's usage for chargeback: GPU, CPU and memory seconds and /v1 tokens, by day, deployment or member (CSV with Accept: text/csv or format=csv)",
          params: WsParams,
          querystring: Type.Object({
            from: Type.Optional(
              Type.String({
                description: "YYYY-MM-DD or an ISO 8601 time; default the first of this month (UTC)",
              }),
            ),
            to: Type.Optional(
              Type.String({ description: "exclusive; a date includes that day; default now" }),
            ),
            by: Type.Optional(
              Type.String({
                description: "day, deployment, member, or several comma-separated; default day",
              }),
            ),
            format: Type.Optional(Type.Union([Type.Literal("json"), Type.Literal("csv")])),
          }),
          response: { 200: UsageReportBody, ...WorkspaceErrors },
        },
      },
      async (req, reply) => {
        const ws = scopedWorkspace(req);
        const q = req.query as { from?: string; to?: string; by?: string; format?: "json" | "csv" };
        const now = usage.now();
        const toMs = q.to !== undefined ? parseBound("to", q.to) : now;
        const fromMs =
          q.from !== undefined ? parseBound("from", q.from) : monthStart(Math.min(now, toMs - 1));
        const report = await usage.report(ws.id, { fromMs, toMs, by: parseBy(q.by) });
        const csv = q.format === "csv" || (q.format === undefined && wantsCsv(req.headers.accept));
        if (csv) {
          reply.type("text/csv; charset=utf-8");
          reply.header("content-disposition", `attachment; filename="usage-${ws.externalId}.csv"`);
          return usageCsv(report);
        }
        return { workspace_id: ws.externalId, ...report };
      },
    );
  };
}

/** Whether the Accept header asks for CSV before JSON. */
function wantsCsv(accept: string | undefined): boolean {
  if (!accept) return false;
  const types = accept.split(",").map((s) => s.split(";")[0]?.trim().toLowerCase());
  const csv = types.indexOf("text/csv");
  const json = types.indexOf("application/json");
  return csv >= 0 && (json < 0 || csv < json);
}
