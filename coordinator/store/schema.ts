import type { Generated } from "kysely";

// Timestamps are ISO 8601 strings and flags are 0/1 integers so that one
// schema reads the same on SQLite and PostgreSQL.

export interface WorkspaceTable {
  id: string;
  external_id: string;
  name: string;
  created_at: string;
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

export interface Database {
  workspaces: WorkspaceTable;
  tokens: TokenTable;
  join_tokens: JoinTokenTable;
  agents: AgentTable;
  cluster_kv: ClusterKvTable;
  // Kysely's own bookkeeping tables are not listed; Generated is kept for later tables.
  _unused?: { id: Generated<number> };
}
