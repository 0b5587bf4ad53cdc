export { DatabaseService } from "./service.ts";
export type {
  CreateDatabase,
  DatabasePods,
  DatabaseSecrets,
  DatabaseServiceOptions,
  DatabaseView,
} from "./service.ts";
export {
  DATABASE_ENGINES,
  checkDatabaseName,
  checkEngine,
  databaseImageCommands,
  databaseSecretName,
} from "./engines.ts";
export { databaseImage } from "./image.ts";
export { databaseRoutes } from "./routes.ts";
export { DatabaseRepo } from "./store.ts";
export { createDatabases, databasesHttpRoutes } from "./area.ts";
