// The store area's entry point: what other areas may use of it.
export type { BotSession, BotSessionEvent, BotSessionRepo, Markers } from "./bot-sessions.ts";
export type { BuiltImage, BuiltImageRepo } from "./built-images.ts";
export type {
  AgentRecord,
  AgentRepo,
  AgentState,
  ClusterKv,
  JoinTokenRecord,
  JoinTokenRepo,
} from "./cluster.ts";
export type { DatabaseEngine, DatabaseRecord, DatabaseRepo } from "./databases.ts";
export type { DeploymentRecord, DeploymentRepo, DeploymentWithStub } from "./deployments.ts";
export { USAGE_ROWS_PER_INSERT } from "./inference.ts";
export type { CatalogEntryRow, InferenceRepo, UsageRecord, UsageRow } from "./inference.ts";
export { MAX_LIMIT_VALUE } from "./limits.ts";
export type { LimitsRepo, WorkspaceLimits } from "./limits.ts";
export type {
  BucketRange,
  ContainerSampleRow,
  MetricsRepo,
  PoolBucket,
  PoolSampleRow,
  SampleScope,
} from "./metrics.ts";
export type { SandboxKind, SandboxRecord, SandboxRepo } from "./sandboxes.ts";
export type { Database } from "./schema.ts";
export type { StackRecord, StackRepo, StackVersionRecord } from "./stacks.ts";
export { Store } from "./store.ts";
export type { ObjectRecord, ObjectRepo, StubInput, StubRecord, StubRepo } from "./stubs.ts";
export type { NewTask, TaskHistoryEntry, TaskListFilter, TaskPatch, TaskRecord, TaskRepo } from "./tasks.ts";
export type { WebhookDeliveryRecord, WebhookPatch, WebhookRecord, WebhookRepo } from "./webhooks.ts";
export type { Principal, TokenRecord, TokenRepo, Workspace, WorkspaceRepo } from "./workspaces.ts";
