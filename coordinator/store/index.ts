// The store area's entry point: the database, its schema and migrations, and
// the cluster's small key-value table. Each area keeps its own tables'
// repository beside its service (coordinator/<area>/store.ts).
export type { Database } from "./schema.ts";
export { ClusterKv } from "./kv.ts";
export { QueryShapes, migrateToLatest, openDatabase, preMigrationBackupPath } from "./db.ts";
export type { Engine } from "./db.ts";
export type {
  DatabaseTable,
  DeploymentTable,
  SandboxImageTable,
  SandboxSnapshotTable,
  SandboxTable,
  StackTable,
  StackVersionTable,
  TaskEventTable,
  TaskTable,
  WebhookDeliveryTable,
  WebhookTable,
} from "./schema.ts";
export { TokenRepo, WorkspaceRepo } from "./workspaces.ts";
export type { Principal, Role, TokenKind, TokenRecord, Workspace } from "./workspaces.ts";
