import type { Generated } from "kysely";

// Timestamps are ISO 8601 strings and flags are 0/1 integers so that one
// schema reads the same on SQLite and PostgreSQL.

export interface WorkspaceTable {
  id: string;
  external_id: string;
  name: string;
  created_at: string;
  /** Signs task callbacks; made on first need. */
  signature_token: string | null;
  max_containers: Generated<number>;
}

export interface TokenTable {
  id: string;
  workspace_id: string;
  name: string;
  token_hash: string;
  /** First characters of the token, to tell tokens apart in listings. */
  prefix: string;
  /** The cluster admin capability (fleet, agents, workspaces), beyond any role. */
  is_admin: number;
  /** admin, developer, runner or viewer (coordinator/http/access.ts). */
  role: string;
  /** JSON array of the deployment names the token is narrowed to; null for all. */
  deployments: string | null;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  /** "token" (an API token) or "session" (a single sign-on login, docs/sso.md). */
  kind: string;
  /** When a session stops being accepted; null for API tokens, which never expire. */
  expires_at: string | null;
  /** The identity provider's user a session was made for (`sub`); null for API tokens. */
  subject: string | null;
}

export interface JoinTokenTable {
  id: string;
  description: string;
  token_hash: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
}

export interface AgentTable {
  id: string;
  hostname: string;
  version: string;
  grpc_address: string;
  joined_at: string;
  last_seen_at: string | null;
  /** ready | lost | left */
  state: string;
  /** Last reported HostCapacity as JSON. */
  capacity_json: string | null;
}

export interface ClusterKvTable {
  key: string;
  value: string;
  updated_at: string;
}

export interface ObjectTable {
  id: Generated<number>;
  workspace_id: string;
  sha256: string;
  /** bigint: PostgreSQL returns it as a string. */
  size: number | string;
  created_at: string;
}

export interface StubTable {
  id: string;
  workspace_id: string;
  name: string;
  type: string;
  /** StubConfig as JSON. */
  config_json: string;
  /** StubExtra as JSON. */
  extra_json: string;
  config_version: number;
  object_id: number | null;
  created_at: string;
  updated_at: string;
}

export interface TaskTable {
  id: string;
  workspace_id: string;
  stub_id: string;
  status: string;
  attempt: number;
  container_id: string | null;
  agent_id: string | null;
  /** Sequence of the task's message in BERTH_TASKS (bigint: a string on PostgreSQL). */
  stream_seq: number | string | null;
  headless: number;
  callback_url: string | null;
  expires_at: string | null;
  /** TaskError as JSON. */
  error_json: string | null;
  /** The pickled return value. */
  result: Buffer | null;
  result_json: string | null;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
  updated_at: string;
  /** The API token whose request submitted the task; null when none did (schedules, public endpoints). */
  token_id: string | null;
}

export interface TaskEventTable {
  id: Generated<number>;
  task_id: string;
  status: string;
  attempt: number;
  container_id: string | null;
  reason: string | null;
  at: string;
}

/** One workspace secret, sealed with AES-256-GCM (coordinator/secrets). */
export interface SecretTable {
  workspace_id: string;
  /** An environment variable name. */
  name: string;
  /** The sealed value followed by the 16-byte GCM tag. */
  ciphertext: Buffer;
  /** 12 bytes, fresh for every write. */
  nonce: Buffer;
  /** Fingerprint of the key that sealed the row (not the key). */
  key_id: string;
  created_at: string;
  updated_at: string;
}

/** One fired (or firing) tick of a schedule; (stub_id, tick_at) is the key. */
export interface ScheduleTickTable {
  stub_id: string;
  /** The tick's cron time, ISO 8601 on a whole minute. */
  tick_at: string;
  /** The coordinator whose insert claimed the tick. */
  coordinator_id: string;
  /** The submitted task; null until submitted, and for good if submitting failed. */
  task_id: string | null;
  created_at: string;
}

/** One version of a named deployment (docs/deployments.md). */
export interface DeploymentTable {
  id: string;
  workspace_id: string;
  name: string;
  /** 1, 2, ... per (workspace, name); 0 for a serve session. */
  version: number;
  /** endpoint, asgi, realtime, taskqueue, schedule or function. */
  kind: string;
  /** Null only while the version's stub is being created. */
  stub_id: string | null;
  active: number;
  serve: number;
  last_request_at: string | null;
  /** When it was deployed or last started (a schedule fires no tick before it). */
  started_at: string;
  created_at: string;
  updated_at: string;
}

/** A webhook subscription (coordinator/webhooks). */
export interface WebhookTable {
  id: string;
  workspace_id: string;
  url: string;
  /** The `event_types` patterns as a JSON array; empty means all eligible events. */
  event_types_json: string;
  description: string;
  enabled: number;
  /** The `whsec_...` signing secret sealed with the secrets key, followed by the GCM tag. */
  secret_ciphertext: Buffer;
  secret_nonce: Buffer;
  /** Fingerprint of the key that sealed the secret. */
  secret_key_id: string;
  created_at: string;
  updated_at: string;
}

/** One delivery attempt of one event to one webhook. */
export interface WebhookDeliveryTable {
  id: string;
  webhook_id: string;
  event_id: string;
  event_type: string;
  /** The consumer's HTTP status; null when no response came (see error). */
  status_code: number | null;
  /** Why no response came (timeout, connection refused, ...); null when one did. */
  error: string | null;
  duration_ms: number;
  attempted_at: string;
}

/** A sandbox or pod container (docs/sandboxes.md); the id is the container id. */
export interface SandboxTable {
  id: string;
  workspace_id: string;
  stub_id: string;
  agent_id: string;
  /** sandbox | pod */
  kind: string;
  /** starting | running | terminated */
  status: string;
  /** Idle seconds before it is terminated; -1 never. */
  ttl_seconds: number;
  last_active_at: string;
  /** last_active_at + ttl_seconds; null when it never expires. */
  expires_at: string | null;
  /** Exposed container ports as a JSON array. */
  ports_json: string;
  /** The EgressPolicy (shared/egress.ts) as JSON. */
  egress_json: string;
  /** The filesystem snapshot (img-...) it started from, if any. */
  image_id: string | null;
  created_at: string;
  terminated_at: string | null;
  terminated_reason: string | null;
  /** The container's exit code when it ended on its own; null while it runs or when ended from outside. */
  exit_code: number | null;
  /** The API token whose request started it; null when none did (a managed database's pod). */
  token_id: string | null;
}

/** A filesystem snapshot of a sandbox: an image in one agent's image store. */
export interface SandboxImageTable {
  id: string;
  workspace_id: string;
  agent_id: string;
  image_ref: string;
  source_sandbox_id: string;
  /** bigint: PostgreSQL returns it as a string. */
  size_bytes: number | string;
  created_at: string;
}

/** A memory snapshot (runc checkpoint) of a sandbox, in one agent's snapshot store. */
export interface SandboxSnapshotTable {
  id: string;
  workspace_id: string;
  agent_id: string;
  source_sandbox_id: string;
  stub_id: string;
  ports_json: string;
  egress_json: string;
  size_bytes: number | string;
  created_at: string;
}

/** Per-workspace limits set by operators (docs/limits.md); null = no limit. */
export interface WorkspaceLimitsTable {
  workspace_id: string;
  max_containers: number | null;
  max_cpu_millicores: number | null;
  max_memory_mb: number | null;
  max_gpus: number | null;
  max_pending_tasks: number | null;
  max_queue_items: number | null;
  max_volume_mb: number | null;
  max_inference_requests: number | null;
  max_tokens_per_minute: number | null;
  /** "gvisor": every container of the workspace runs under gVisor; null: each stub's isolation=. */
  isolation: string | null;
  /** JSON {"A100": 2}: GPUs held at once by type; null: none by type. */
  max_gpus_by_type: string | null;
  gpu_hours_per_month: number | null;
  cpu_hours_per_month: number | null;
  v1_tokens_per_month: number | null;
  /** 0: the workspace's containers run without a user namespace (root inside is the host's root); null or 1: with one. */
  user_namespace: number | null;
  /** "denylist": the older allow-by-default seccomp profile; null or "allowlist": the default-deny one. */
  syscall_filter: string | null;
  updated_at: string;
}

/** One container's usage at one sample (coordinator/metrics). bigint columns read as strings on PostgreSQL. */
export interface ContainerSampleTable {
  container_id: string;
  /** ms since epoch. */
  at_ms: number | string;
  agent_id: string;
  pool: string;
  workspace_id: string | null;
  stub_id: string | null;
  cpu_cores: number;
  memory_bytes: number | string;
  cpu_limit_cores: number;
  memory_limit_bytes: number | string;
  gpu_count: Generated<number>;
  /** Mean over the container's GPUs; null when not sampled. */
  gpu_utilization: number | null;
  gpu_memory_bytes: number | string | null;
}

/** One pool's capacity vs use for one 15 s interval; (pool, bucket_ms) is the key. */
export interface PoolSampleTable {
  pool: string;
  bucket_ms: number | string;
  at_ms: number | string;
  coordinator_id: string;
  agents: number;
  cpu_capacity_cores: number;
  cpu_allocated_cores: number;
  cpu_used_cores: number;
  memory_capacity_bytes: number | string;
  memory_allocated_bytes: number | string;
  memory_used_bytes: number | string;
  gpu_capacity: number;
  gpu_allocated: number;
}

export interface Database {
  workspaces: WorkspaceTable;
  tokens: TokenTable;
  join_tokens: JoinTokenTable;
  agents: AgentTable;
  cluster_kv: ClusterKvTable;
  objects: ObjectTable;
  stubs: StubTable;
  tasks: TaskTable;
  task_events: TaskEventTable;
  secrets: SecretTable;
  schedule_ticks: ScheduleTickTable;
  deployments: DeploymentTable;
  webhooks: WebhookTable;
  webhook_deliveries: WebhookDeliveryTable;
  workspace_limits: WorkspaceLimitsTable;
  sandboxes: SandboxTable;
  sandbox_images: SandboxImageTable;
  sandbox_snapshots: SandboxSnapshotTable;
  container_samples: ContainerSampleTable;
  pool_samples: PoolSampleTable;
  inference_usage: InferenceUsageTable;
  model_catalog: ModelCatalogTable;
  bot_sessions: BotSessionTable;
  bot_session_events: BotSessionEventTable;
  stacks: StackTable;
  stack_versions: StackVersionTable;
  databases: DatabaseTable;
  audit_log: AuditLogTable;
}

/** One change made through the API (coordinator/workspaces/audit.ts); rows are only ever inserted. */
export interface AuditLogTable {
  id: string;
  workspace_id: string;
  at: string;
  token_id: string;
  token_name: string;
  role: string;
  cluster_admin: number;
  client_ip: string;
  user_agent: string;
  /** What was changed, as the route declares it (deployment.delete, secret.update, ...). */
  action: string;
  method: string;
  /** The route's pattern (/api/v1/deployment/:ws/:id). */
  route: string;
  object_id: string | null;
  status: number;
  /** ok, denied (401/403) or failed. */
  outcome: string;
  error_code: string | null;
}

/** One /v1 request (coordinator/inference): tokens as the model server reported them. */
export interface InferenceUsageTable {
  id: string;
  workspace_id: string;
  token_id: string | null;
  model: string;
  route: string;
  deployment_id: string | null;
  task_id: string | null;
  stream: number;
  status: number;
  error_code: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  total_tokens: number | null;
  ttft_ms: number | null;
  duration_ms: number;
  /** bigint: PostgreSQL returns it as a string. */
  at_ms: number | string;
}

/** A deployment (by name; its latest active version serves) published to every workspace. */
export interface ModelCatalogTable {
  workspace_id: string;
  deployment_name: string;
  published_at: string;
}

/** A bot session (coordinator/bots/store.ts): `state` is its JSON document. */
export interface BotSessionTable {
  id: string;
  workspace_id: string;
  bot_name: string;
  state: string;
  version: number;
  created_at: string;
  updated_at: string;
}

/** One change of a bot session; `seq` is the session version the change made. */
export interface BotSessionEventTable {
  session_id: string;
  seq: number;
  kind: string;
  body: string;
  at: string;
}

/** A stack (docs/stacks.md): its live version and the attempt in flight. */
export interface StackTable {
  id: string;
  workspace_id: string;
  name: string;
  /** The version whose members are live; 0 before the first attempt succeeded. */
  current_version: number;
  /** The attempt in flight; null when none. */
  applying_version: number | null;
  /** When the attempt in flight may be taken over (its coordinator stopped); null when none. */
  lease_until: string | null;
  created_at: string;
  updated_at: string;
}

/** One attempt of a stack: what was asked (spec), what its members became, why it failed. */
export interface StackVersionTable {
  stack_id: string;
  version: number;
  /** applying, ready, rolled_back or abandoned (its coordinator stopped mid-apply). */
  status: string;
  /** JSON: the members as asked. */
  spec: string;
  /** JSON: each member's outcome. */
  members: string;
  /** JSON {member, reason}; null unless the attempt failed. */
  failure: string | null;
  created_at: string;
  updated_at: string;
}

/** A managed database of a workspace (migration 0020_databases; docs/databases.md). */
export interface DatabaseTable {
  id: string;
  workspace_id: string;
  name: string;
  /** postgres or redis. */
  engine: string;
  /** starting, running, stopped or failed. */
  status: string;
  stub_id: string;
  pod_id: string | null;
  agent_id: string | null;
  volume: string;
  secret_name: string;
  local_port: number;
  error: string;
  created_at: string;
  updated_at: string;
}
