import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Secrets and ports of a `berth up` cluster, made at its first start. */
export interface UpCluster {
  natsPort: number;
  coordinatorPort: number;
  agentGrpcPort: number;
  natsCoordinatorPassword: string;
  natsAgentPassword: string;
}

export function loadOrCreateUpCluster(dataDir: string, ports: Partial<UpCluster>): UpCluster {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, "cluster.json");
  const saved: Partial<UpCluster> = existsSync(path)
    ? (JSON.parse(readFileSync(path, "utf8")) as UpCluster)
    : {};
  const cluster: UpCluster = {
    natsPort: ports.natsPort ?? saved.natsPort ?? 4222,
    coordinatorPort: ports.coordinatorPort ?? saved.coordinatorPort ?? 8420,
    agentGrpcPort: ports.agentGrpcPort ?? saved.agentGrpcPort ?? 8421,
    natsCoordinatorPassword: saved.natsCoordinatorPassword ?? randomBytes(24).toString("base64url"),
    natsAgentPassword: saved.natsAgentPassword ?? randomBytes(24).toString("base64url"),
  };
  writeFileSync(path, `${JSON.stringify(cluster, null, 2)}\n`, { mode: 0o600 });
  return cluster;
}
