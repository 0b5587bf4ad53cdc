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
  is_admin: number;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
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
}
