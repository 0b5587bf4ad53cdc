import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import { refuseStoreSwitch } from "./store-switch.ts";

/** Secrets and ports of a `berth up` cluster, made at its first start. */
export interface UpCluster {
  natsPort: number;
  coordinatorPort: number;
  agentGrpcPort: number;
  /** PostgreSQL's port when berth up runs it (--replicas). */
  postgresPort: number;
  natsCoordinatorPassword: string;
  natsAgentPassword: string;
}

/** NATS client ports firstPort..firstPort+n-1 and, for a cluster (n > 1), route ports right after them. */
export function natsClusterPorts(firstPort: number, n: number): { client: number[]; route: number[] } {
  const client = Array.from({ length: n }, (_, i) => firstPort + i);
  return { client, route: client.map((p) => p + n) };
}

type PortKey = "natsPort" | "coordinatorPort" | "agentGrpcPort" | "postgresPort";

const PORT_FLAGS: Record<PortKey, string> = {
  natsPort: "--nats-port",
  coordinatorPort: "--port",
  agentGrpcPort: "--grpc-port",
  postgresPort: "--postgres-port",
};

/** One port a `berth up` cluster listens on, and where its number came from. */
interface PortUse {
  what: string;
  port: number;
  key: PortKey;
}

/** Every port the cluster's processes take (the registry's is free-picked at its first start). */
export function upPortUses(c: UpCluster, replicas: number, o: { store?: boolean } = {}): PortUse[] {
  const uses: PortUse[] = [];
  const nats = natsClusterPorts(c.natsPort, replicas);
  for (const [i, port] of nats.client.entries())
    uses.push({ what: replicas > 1 ? `NATS node ${i + 1}` : "NATS", port, key: "natsPort" });
  if (replicas > 1)
    for (const [i, port] of nats.route.entries())
      uses.push({ what: `NATS node ${i + 1}'s route`, port, key: "natsPort" });
  for (let i = 0; i < replicas; i++)
    uses.push({
      what: replicas > 1 ? `coordinator ${i + 1}` : "the coordinator",
      port: c.coordinatorPort + i,
      key: "coordinatorPort",
    });
  uses.push({ what: "the agent's gRPC listener", port: c.agentGrpcPort, key: "agentGrpcPort" });
  if (replicas > 1 && !o.store) uses.push({ what: "PostgreSQL", port: c.postgresPort, key: "postgresPort" });
  return uses;
}

/**
 * `replicas` coordinators take coordinatorPort.. coordinatorPort+replicas-1; on a first start the
 * agent's gRPC port and PostgreSQL's come right after them (8421 and 8422 for one coordinator).
 * Ports are kept in cluster.json; a start whose ports clash (a cluster first started with one
 * coordinator, now with three, finds its saved agent and PostgreSQL ports among the coordinators')
 * is refused before anything is written or started, naming each clash and the flag that moves it;
 * so is a start on a store other than the one the data dir's records are in (store-switch.ts).
 */
export function loadOrCreateUpCluster(
  dataDir: string,
  ports: Partial<UpCluster>,
  replicas = 1,
  o: { store?: boolean } = {},
): UpCluster {
  // First: moving ports would not help a start on the wrong store.
  refuseStoreSwitch(dataDir, replicas, o.store === true);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, "cluster.json");
  const saved: Partial<UpCluster> = existsSync(path)
    ? (JSON.parse(readFileSync(path, "utf8")) as UpCluster)
    : {};
  const coordinatorPort = ports.coordinatorPort ?? saved.coordinatorPort ?? 8420;
  const cluster: UpCluster = {
    natsPort: ports.natsPort ?? saved.natsPort ?? 4222,
    coordinatorPort,
    agentGrpcPort: ports.agentGrpcPort ?? saved.agentGrpcPort ?? coordinatorPort + replicas,
    postgresPort: ports.postgresPort ?? saved.postgresPort ?? coordinatorPort + replicas + 1,
    natsCoordinatorPassword: saved.natsCoordinatorPassword ?? randomBytes(24).toString("base64url"),
    natsAgentPassword: saved.natsAgentPassword ?? randomBytes(24).toString("base64url"),
  };
  const origin = (key: PortKey) =>
    ports[key] !== undefined
      ? PORT_FLAGS[key]
      : saved[key] !== undefined
        ? `saved in ${path}`
        : "the default";
  const clashes: string[] = [];
  const uses = upPortUses(cluster, replicas, o);
  uses.forEach((a, i) => {
    for (const b of uses.slice(i + 1)) {
      if (a.port !== b.port || a.key === b.key) continue;
      clashes.push(
        `port ${a.port} is both ${a.what}'s (${origin(a.key)}) and ${b.what}'s (${origin(b.key)}): ` +
          `move one with ${PORT_FLAGS[ports[b.key] === undefined ? b.key : a.key]}`,
      );
    }
  });
  if (clashes.length > 0) throw new BerthError("invalid_request", clashes.join("; "));
  writeFileSync(path, `${JSON.stringify(cluster, null, 2)}\n`, { mode: 0o600 });
  return cluster;
}
