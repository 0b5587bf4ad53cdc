// What the coordinator and the agent agree on about database pods
// (docs/databases.md, "Reaching a database"): the labels that let an agent
// find, among its own containers, the pod serving a workspace's database on
// a local port, and the bridge route a container asks it on.

export const DatabaseLabels = {
  /** The 127.0.0.1 port the database's URL names inside the workspace's containers. */
  localPort: "berth.database_local_port",
  /** The server's port inside its pod (5432, 6379). */
  serverPort: "berth.database_port",
} as const;

/** `/v1/databases/{local port}/connect` on a container's agent socket, with `Upgrade: berth-tcp`. */
export const DATABASE_CONNECT_ROUTE = /^\/v1\/databases\/(\d{1,5})\/connect$/;

/** The protocol of the upgrade: after 101, the connection carries the database's bytes as they are. */
export const DATABASE_UPGRADE = "berth-tcp";

export type DatabaseEngine = "postgres" | "redis";
/**
 * starting: a create or start is bringing its pod up; running: its readiness
 * check answered; stopped: no pod (the data stays on the volume); failed: the
 * last start did not become ready (`error` says why).
 */
export type DatabaseStatus = "starting" | "running" | "stopped" | "failed";

/** A database as the routes, the CLI and stacks see it; never the password. */
export interface DatabaseView {
  id: string;
  name: string;
  engine: DatabaseEngine;
  status: DatabaseStatus;
  /** The workspace secret holding the connection URL (functions name it in secrets=[...]). */
  secret_name: string;
  volume: string;
  /** Where functions reach it: 127.0.0.1:local_port inside their own container. */
  host: string;
  local_port: number;
  /** The server's port inside its pod. */
  port: number;
  pod_id: string | null;
  agent_id: string | null;
  error: string;
  created_at: string;
  updated_at: string;
}
