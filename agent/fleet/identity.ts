import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { BerthError, describeError } from "../../shared/errors.ts";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import type { AgentNatsCredentials } from "../../shared/agent-nats.ts";

/** What a host keeps after joining, so restarts need no new join. */
export interface AgentIdentity {
  agentId: string;
  coordinator: string;
  nats: AgentNatsCredentials;
  heartbeatIntervalMs: number;
  tls: { caPem: string; certPem: string; keyPem: string };
  /** The cluster registry and its credentials, when the coordinator has one. */
  registry?: ClusterRegistryAccess;
}

export function loadIdentity(path: string): AgentIdentity | undefined {
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, "utf8")) as AgentIdentity;
  } catch (e) {
    throw new BerthError("internal", `agent identity ${path} is unreadable: ${describeError(e)}; remove it to join afresh`);
  }
}

/** Written atomically with mode 0600: it holds credentials. */
export function saveIdentity(path: string, id: AgentIdentity): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(id, null, 2), { mode: 0o600 });
  renameSync(tmp, path);
}
