import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

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

/**
 * `replicas` coordinators take coordinatorPort.. coordinatorPort+replicas-1; on a first start the
 * agent's gRPC port and PostgreSQL's come right after them (8421 and 8422 for one coordinator).
 */
export function loadOrCreateUpCluster(dataDir: string, ports: Partial<UpCluster>, replicas = 1): UpCluster {
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
  writeFileSync(path, `${JSON.stringify(cluster, null, 2)}\n`, { mode: 0o600 });
  return cluster;
}
