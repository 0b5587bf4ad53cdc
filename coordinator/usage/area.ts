// The usage area (docs/usage.md): usage for chargeback, computed when asked
// from the records other areas keep (tasks, sandboxes, /v1 requests); it
// keeps nothing of its own. Its repository reads those tables directly, as a
// report over them, so it needs none of their areas' services.
import type { Kysely } from "kysely";
import type { Area, AreaRoutes } from "../http/index.ts";
import type { Database } from "../store/index.ts";
import { UsageService, type UsageServiceDeps } from "./report.ts";
import { usageRoutes } from "./routes.ts";
import { UsageRepo } from "./store.ts";

export function usageHttpRoutes(usage: UsageService): AreaRoutes {
  return { api: [usageRoutes(usage)] };
}

export function createUsage(d: {
  db: Kysely<Database>;
  volumeBytes?: UsageServiceDeps["volumeBytes"];
  clock?: () => number;
}): Area<UsageService> {
  const usage = new UsageService({
    repo: new UsageRepo(d.db),
    ...(d.volumeBytes ? { volumeBytes: d.volumeBytes } : {}),
    ...(d.clock ? { clock: d.clock } : {}),
  });
  return { service: usage, routes: usageHttpRoutes(usage) };
}
