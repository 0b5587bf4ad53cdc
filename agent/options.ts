import { hostname } from "node:os";
import { join } from "node:path";
import { BerthError } from "../shared/errors.ts";

export interface AgentOptions {
  /** Coordinator URL to join; omitted for an edge agent with no coordinator. */
  coordinator?: string;
  /** Join token (`bj_...`) from the coordinator's operator. */
  joinToken?: string;
  /** Agent state: identity, containers, images. @default "/var/lib/berth-agent" */
  dataDir?: string;
  /** @default os.hostname() */
  hostname?: string;
  /** Where the TLS gRPC listener binds. @default "0.0.0.0" */
  grpcHost?: string;
  /** @default 8421 */
  grpcPort?: number;
  /** host:port coordinators dial. @default "<hostname>:<grpcPort>" */
  advertiseAddress?: string;
  /** nvidia-smi to probe GPUs with. @default "nvidia-smi" */
  nvidiaSmi?: string;
  /** Seconds between GPU re-fingerprints. @default 60 */
  gpuProbeIntervalS?: number;
  /** @default "info" */
  logLevel?: string;
}

export interface ResolvedAgentOptions {
  coordinator?: string;
  joinToken?: string;
  dataDir: string;
  hostname: string;
  grpcHost: string;
  grpcPort: number;
  advertiseAddress: string;
  nvidiaSmi: string;
  gpuProbeIntervalMs: number;
  logLevel: string;
  identityFile: string;
  unixSocket: string;
}

export function resolveAgentOptions(o: AgentOptions): ResolvedAgentOptions {
  if (o.coordinator) {
    let u: URL;
    try {
      u = new URL(o.coordinator);
    } catch {
      throw new BerthError("invalid_request", `--coordinator ${JSON.stringify(o.coordinator)} is not a URL`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new BerthError("invalid_request", `--coordinator must be an http(s) URL, got ${u.protocol}`);
    }
  }
  const grpcPort = o.grpcPort ?? 8421;
  if (!Number.isInteger(grpcPort) || grpcPort < 0 || grpcPort > 65535) {
    throw new BerthError("invalid_request", `--grpc-port ${grpcPort} is not a TCP port`);
  }
  const dataDir = o.dataDir ?? "/var/lib/berth-agent";
  const host = o.hostname ?? hostname();
  return {
    ...(o.coordinator ? { coordinator: o.coordinator.replace(/\/+$/, "") } : {}),
    ...(o.joinToken ? { joinToken: o.joinToken } : {}),
    dataDir,
    hostname: host,
    grpcHost: o.grpcHost ?? "0.0.0.0",
    grpcPort,
    advertiseAddress: o.advertiseAddress ?? `${host}:${grpcPort}`,
    nvidiaSmi: o.nvidiaSmi ?? "nvidia-smi",
    gpuProbeIntervalMs: (o.gpuProbeIntervalS ?? 60) * 1000,
    logLevel: o.logLevel ?? "info",
    identityFile: join(dataDir, "identity.json"),
    unixSocket: join(dataDir, "agent.sock"),
  };
}
