// The objects area (code archives and other content-addressed uploads): its service and the SDK gateway's upload routes.
import type { Area, AreaRoutes } from "../http/index.ts";
import { Objects } from "./objects.ts";
import { gatewayObjectRoutes } from "./routes.ts";
import type { ObjectRepo } from "./store.ts";

export function objectsHttpRoutes(objects: Objects): AreaRoutes {
  return { gateway: [gatewayObjectRoutes(objects)] };
}

export function createObjects(d: { repo: ObjectRepo; dataDir: string }): Area<Objects> {
  const objects = new Objects(d.repo, d.dataDir);
  return { service: objects, routes: objectsHttpRoutes(objects) };
}
