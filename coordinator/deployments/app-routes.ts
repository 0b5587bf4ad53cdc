// `/api/v1/app/{ws}` (docs/api.md "Apps"). An app is every version of one
// deployment name in a workspace (`berth deploy` of the same name makes
// version 2, 3, ...; a `berth serve` session of that name is version 0). Its
// id is `app-{name}`: stable across versions and never equal to "latest".

import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { DeploymentService } from "./service.ts";
import type { DeploymentRecord } from "./store.ts";
import { NextCursor, pageQuery, pageRequest, paginate } from "../http/index.ts";
import { DeploymentBody, deploymentJson } from "./routes.ts";
import { scopedWorkspace, WorkspaceErrors, WsParams } from "../http/index.ts";

export interface AppRouteDeps {
  deployments: DeploymentService;
}

export const APP_ID_PREFIX = "app-";

export const AppBody = Type.Object({
  id: Type.String({ description: "app-{name}" }),
  name: Type.String({ description: "the deployment name" }),
  type: Type.String({ description: "the kind of its latest version" }),
  state: Type.Union([Type.Literal("active"), Type.Literal("stopped")], {
    description: "active when any version is active",
  }),
  latest_version: Type.Integer({ description: "its highest version (0: only a serve session)" }),
  latest_deployment_id: Type.String(),
  versions: Type.Integer({ description: "how many versions exist" }),
  active_versions: Type.Integer(),
  url: Type.String({ description: "the URL of the latest version; empty for schedules and functions" }),
  stub_ids: Type.Array(Type.String(), { description: "the stubs of its versions, latest first" }),
  created_at: Type.String({ format: "date-time", description: "its first version" }),
  updated_at: Type.String({ format: "date-time", description: "the last change of any version" }),
  last_request_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
});

// ISO 8601 times in UTC order as strings do.
const maxOf = (xs: string[]) => [...xs].sort().at(-1) ?? "";
const minOf = (xs: string[]) => [...xs].sort()[0] ?? "";

interface App {
  name: string;
  /** Newest version first. */
  versions: DeploymentRecord[];
  activity: string;
}

/** The workspace's deployments grouped by name. */
function appsOf(deployments: DeploymentRecord[]): App[] {
  const byName = new Map<string, DeploymentRecord[]>();
  for (const d of deployments) {
    const list = byName.get(d.name) ?? [];
    list.push(d);
    byName.set(d.name, list);
  }
  return [...byName].map(([name, versions]) => {
    versions.sort((a, b) => b.version - a.version);
    const activity = maxOf(versions.flatMap((v) => [v.updatedAt, v.lastRequestAt ?? ""]));
    return { name, versions, activity };
  });
}

const latestOf = (a: App) => a.versions[0] as DeploymentRecord;

export function appRoutes(d: AppRouteDeps): FastifyPluginAsync {
  const { deployments } = d;
  const appJson = (a: App) => {
    const latest = latestOf(a);
    const active = a.versions.filter((v) => v.active).length;
    const requests = a.versions.map((v) => v.lastRequestAt).filter((x): x is string => x !== null);
    return {
      id: `${APP_ID_PREFIX}${a.name}`,
      name: a.name,
      type: latest.kind,
      state: active > 0 ? ("active" as const) : ("stopped" as const),
      latest_version: latest.version,
      latest_deployment_id: latest.id,
      versions: a.versions.length,
      active_versions: active,
      url: deployments.urlOf(latest),
      stub_ids: a.versions.map((v) => v.stubId),
      created_at: minOf(a.versions.map((v) => v.createdAt)),
      updated_at: maxOf(a.versions.map((v) => v.updatedAt)),
      last_request_at: requests.length > 0 ? maxOf(requests) : null,
    };
  };
  const listQuery = pageQuery({
    state: Type.Optional(Type.Union([Type.Literal("active"), Type.Literal("stopped")])),
  });
  type ListQuery = { state?: "active" | "stopped"; limit?: number; cursor?: string };
  const filtered = async (wsId: string, q: ListQuery) =>
    appsOf(await deployments.list(wsId)).filter(
      (a) => q.state === undefined || (q.state === "active") === a.versions.some((v) => v.active),
    );

  return async (app) => {
    app.get(
      "/api/v1/app/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["apps"],
          summary: "The workspace's apps (one per deployment name), by name",
          params: WsParams,
          querystring: listQuery,
          response: {
            200: Type.Object({ apps: Type.Array(AppBody), next_cursor: NextCursor }),
            ...WorkspaceErrors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const q = req.query as ListQuery;
        const page = pageRequest("apps", q, 1);
        const { items, next_cursor } = paginate("apps", await filtered(ws.id, q), (a) => [a.name], page);
        return { apps: items.map(appJson), next_cursor };
      },
    );

    app.get(
      "/api/v1/app/:ws/latest",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["apps"],
          summary: "The apps with their latest deployment, most recent activity first",
          params: WsParams,
          querystring: listQuery,
          response: {
            200: Type.Object({
              apps: Type.Array(Type.Composite([AppBody, Type.Object({ latest_deployment: DeploymentBody })])),
              next_cursor: NextCursor,
            }),
            ...WorkspaceErrors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const q = req.query as ListQuery;
        const page = pageRequest("apps-latest", q, 2);
        const { items, next_cursor } = paginate(
          "apps-latest",
          await filtered(ws.id, q),
          (a) => [a.activity, a.name],
          page,
          "desc",
        );
        return {
          apps: items.map((a) => ({
            ...appJson(a),
            latest_deployment: deploymentJson(deployments, latestOf(a)),
          })),
          next_cursor,
        };
      },
    );

    app.get(
      "/api/v1/app/:ws/:appId",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["apps"],
          summary: "One app with all its versions, newest first",
          params: Type.Object({ ws: Type.String(), appId: Type.String({ description: "app-{name}" }) }),
          response: {
            200: Type.Composite([AppBody, Type.Object({ deployments: Type.Array(DeploymentBody) })]),
            ...WorkspaceErrors,
          },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const { appId } = req.params as { appId: string };
        const name = appId.startsWith(APP_ID_PREFIX) ? appId.slice(APP_ID_PREFIX.length) : "";
        const found = name ? appsOf(await deployments.list(ws.id, { name }))[0] : undefined;
        if (!found) throw new BerthError("not_found", `app ${appId} not found`);
        return { ...appJson(found), deployments: found.versions.map((v) => deploymentJson(deployments, v)) };
      },
    );
  };
}
