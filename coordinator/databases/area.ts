// The databases area (docs/databases.md): managed databases as pods of the
// workspace, their data on volumes, their URL in a secret.
import type { Area, AreaRoutes } from "../http/index.ts";
import { databaseRoutes } from "./routes.ts";
import { DatabaseService, type DatabaseServiceOptions } from "./service.ts";

export function databasesHttpRoutes(databases: DatabaseService): AreaRoutes {
  return { api: [databaseRoutes(databases)] };
}

export function createDatabases(o: DatabaseServiceOptions): Area<DatabaseService> {
  const databases = new DatabaseService(o);
  return { service: databases, routes: databasesHttpRoutes(databases) };
}
