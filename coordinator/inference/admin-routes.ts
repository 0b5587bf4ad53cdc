// The workspace REST side of hosted inference (docs/inference.md):
// `GET /api/v1/usage/{ws}` (usage rows and totals of the /v1 requests) and
// the public model catalog, which operators (admin tokens) publish
// deployments to. The /v1 routes themselves are coordinator/inference/routes.ts.

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { ModelDirectory } from "./models.ts";
import type { DeploymentRepo } from "../deployments/index.ts";
import type { InferenceRepo, UsageRow } from "./store.ts";
import type { WorkspaceRepo } from "../store/index.ts";
import { principalOf } from "../http/index.ts";
import { isoQueryTime, scopedWorkspace, WorkspaceErrors, WsParams } from "../http/index.ts";

export interface InferenceRestDeps {
  repo: Pick<InferenceRepo, "usage" | "totals" | "catalog" | "publish" | "unpublish">;
  workspaces: Pick<WorkspaceRepo, "byExternalId" | "get">;
  deployments: Pick<DeploymentRepo, "list">;
  models: Pick<ModelDirectory, "catalogChanged">;
}

const MAX_ROWS = 1000;

const UsageQuery = Type.Object(
  {
    since: Type.Optional(Type.String({ description: "ISO 8601: requests from this time on" })),
    until: Type.Optional(Type.String({ description: "ISO 8601: requests before this time" })),
    model: Type.Optional(Type.String({ maxLength: 256 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_ROWS, default: 100 })),
  },
  { additionalProperties: false },
);

const Tokens = Type.Union([Type.Integer(), Type.Null()]);
const UsageRowJson = Type.Object({
  id: Type.String(),
  created_at: Type.String(),
  token_id: Type.Union([Type.String(), Type.Null()]),
  model: Type.String(),
  route: Type.String({ description: "chat.completions | completions | embeddings | invoke" }),
  deployment_id: Type.Union([Type.String(), Type.Null()]),
  task_id: Type.Union([Type.String(), Type.Null()]),
  stream: Type.Boolean(),
  status: Type.Integer({ description: "HTTP status the caller got; 499: the caller left first" }),
  error_code: Type.Union([Type.String(), Type.Null()]),
  prompt_tokens: Tokens,
  completion_tokens: Tokens,
  total_tokens: Tokens,
  time_to_first_token_ms: Tokens,
  duration_ms: Type.Integer(),
});

const rowJson = (r: UsageRow) => ({
  id: r.id,
  created_at: new Date(r.atMs).toISOString(),
  token_id: r.tokenId,
  model: r.model,
  route: r.route,
  deployment_id: r.deploymentId,
  task_id: r.taskId,
  stream: r.stream,
  status: r.status,
  error_code: r.errorCode,
  prompt_tokens: r.promptTokens,
  completion_tokens: r.completionTokens,
  total_tokens: r.totalTokens,
  time_to_first_token_ms: r.ttftMs,
  duration_ms: r.durationMs,
});

const CatalogEntry = Type.Object({
  workspace_id: Type.String(),
  deployment: Type.String(),
  published_at: Type.String(),
});

export function inferenceRestRoutes(d: InferenceRestDeps): FastifyPluginAsync {
  const catalogJson = async () => {
    const out = [];
    for (const r of await d.repo.catalog()) {
      const ws = await d.workspaces.get(r.workspaceId);
      out.push({
        workspace_id: ws?.externalId ?? r.workspaceId,
        deployment: r.deploymentName,
        published_at: r.publishedAt,
      });
    }
    return { catalog: out };
  };
  const target = async (externalId: string | undefined, fallback: { id: string; externalId: string }) => {
    if (externalId === undefined || externalId === fallback.externalId) return fallback;
    const ws = await d.workspaces.byExternalId(externalId);
    if (!ws) throw new BerthError("not_found", `workspace ${externalId} not found`);
    return ws;
  };

  return async (app) => {
    app.get(
      "/api/v1/usage/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["inference"],
          summary: "Usage of the /v1 inference gateway: rows (newest first) and totals over the same filter",
          params: WsParams,
          querystring: UsageQuery,
          response: {
            200: Type.Object({
              workspace_id: Type.String(),
              totals: Type.Object({
                requests: Type.Integer(),
                prompt_tokens: Type.Integer(),
                completion_tokens: Type.Integer(),
                total_tokens: Type.Integer(),
              }),
              usage: Type.Array(UsageRowJson),
            }),
            ...WorkspaceErrors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const q = req.query as { since?: string; until?: string; model?: string; limit?: number };
        const since = isoQueryTime("since", q.since);
        const until = isoQueryTime("until", q.until);
        const filter = {
          ...(since ? { sinceMs: Date.parse(since) } : {}),
          ...(until ? { untilMs: Date.parse(until) } : {}),
          ...(q.model !== undefined ? { model: q.model } : {}),
        };
        const [rows, t] = await Promise.all([
          d.repo.usage(ws.id, { ...filter, limit: q.limit ?? 100 }),
          d.repo.totals(ws.id, filter),
        ]);
        return {
          workspace_id: ws.externalId,
          totals: {
            requests: t.requests,
            prompt_tokens: t.promptTokens,
            completion_tokens: t.completionTokens,
            total_tokens: t.totalTokens,
          },
          usage: rows.map(rowJson),
        };
      },
    );

    app.get(
      "/api/v1/catalog",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["inference"],
          summary: "The public model catalog: deployments published to every workspace",
          response: { 200: Type.Object({ catalog: Type.Array(CatalogEntry) }), ...WorkspaceErrors },
        },
      },
      catalogJson,
    );

    app.post(
      "/api/v1/catalog",
      {
        config: { access: { needs: "cluster", audit: "catalog.publish" } },
        schema: {
          tags: ["inference"],
          summary: "Publish a deployment's models to every workspace (admin token)",
          body: Type.Object(
            {
              deployment: Type.String({
                minLength: 1,
                description: "deployment name; its latest active version serves",
              }),
              workspace_id: Type.Optional(Type.String({ description: "its workspace; default the token's" })),
            },
            { additionalProperties: false },
          ),
          response: { 200: Type.Object({ catalog: Type.Array(CatalogEntry) }), ...WorkspaceErrors },
        },
      },
      async (req) => {
        const b = req.body as { deployment: string; workspace_id?: string };
        const ws = await target(b.workspace_id, principalOf(req).workspace);
        if ((await d.deployments.list(ws.id, b.deployment)).length === 0)
          throw new BerthError(
            "not_found",
            `no deployment named ${b.deployment} in workspace ${ws.externalId}`,
          );
        await d.repo.publish(ws.id, b.deployment, new Date().toISOString());
        d.models.catalogChanged();
        req.log.info({ workspaceId: ws.id, deployment: b.deployment }, "inference: deployment published");
        return catalogJson();
      },
    );

    app.delete(
      "/api/v1/catalog/:ws/:deployment",
      {
        config: { access: { needs: "cluster", audit: "catalog.unpublish" } },
        schema: {
          tags: ["inference"],
          summary: "Take a deployment out of the public catalog (admin token)",
          params: Type.Object({ ws: Type.String(), deployment: Type.String() }),
          response: { 200: Type.Object({ catalog: Type.Array(CatalogEntry) }), ...WorkspaceErrors },
        },
      },
      async (req) => {
        const p = req.params as { ws: string; deployment: string };
        const ws = await target(p.ws, principalOf(req).workspace);
        if (!(await d.repo.unpublish(ws.id, p.deployment)))
          throw new BerthError("not_found", `deployment ${p.deployment} of ${p.ws} is not in the catalog`);
        d.models.catalogChanged();
        return catalogJson();
      },
    );
  };
}
