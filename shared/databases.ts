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
