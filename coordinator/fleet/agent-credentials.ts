// Per-agent NATS identities and revocation (docs/install.md, "Agent
// credentials"). Each agent joins with the public half of an nkey it made;
// the coordinator records it in cluster_kv and writes nats-server's users
// file (users.conf, included by nats.conf) from the store: the cluster's
// static users plus one nkey user per agent, limited to that agent's
// subjects. A reload makes nats-server apply it, which also closes the live
// connection of a user that is gone.

import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { agentNatsPermissions } from "../../shared/agent-nats.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { type NatsUser, natsUsersConf } from "../../shared/nats-server.ts";
import type { ClusterKv } from "../store/index.ts";

const NKEY_PREFIX = "agent-nats-nkey/";
const REVOKED_PREFIX = "agent-revoked/";

export interface AgentNatsUsersOptions {
  kv: ClusterKv;
  /** nats-server's users.conf (the authorization block includes it); rewritten whole. */
  usersFile: string;
  /**
   * nats-server's pid_file: SIGHUP after each write; every node's of a cluster whose nodes read
   * this one file (berth up --replicas). Without it something else reloads (a systemd path unit).
   */
  pidFile?: string | string[];
  /** Users that are not agents (the coordinator's, the legacy shared agent user). */
  staticUsers: NatsUser[];
}

export class AgentNatsUsers {
  private chain: Promise<unknown> = Promise.resolve();

  constructor(private readonly o: AgentNatsUsersOptions) {}

  /** Records the agent's public nkey and reloads nats-server with it. */
  async add(agentId: string, nkey: string): Promise<void> {
    await this.o.kv.put(`${NKEY_PREFIX}${agentId}`, nkey);
    await this.sync();
  }

  async remove(agentId: string): Promise<void> {
    await this.o.kv.delete(`${NKEY_PREFIX}${agentId}`);
    await this.sync();
  }

  async has(agentId: string): Promise<boolean> {
    return (await this.o.kv.get(`${NKEY_PREFIX}${agentId}`)) !== undefined;
  }

  /**
   * Writes users.conf from the store and reloads; one at a time, so the last write holds the latest
   * store. True when it reloaded; an unchanged file is neither written nor reloaded (a reload makes
   * JetStream's API answer 503 for a moment, which a coordinator starting up met).
   */
  sync(): Promise<boolean> {
    const run = this.chain.then(() => this.writeAndReload());
    this.chain = run.catch(() => false);
    return run;
  }

  private async writeAndReload(): Promise<boolean> {
    const revoked = new Set(
      (await this.o.kv.list(REVOKED_PREFIX)).map((r) => r.key.slice(REVOKED_PREFIX.length)),
    );
    const agents: NatsUser[] = (await this.o.kv.list(NKEY_PREFIX))
      .map((r) => ({ agentId: r.key.slice(NKEY_PREFIX.length), nkey: r.value }))
      .filter((a) => !revoked.has(a.agentId))
      .map((a) => ({ nkey: a.nkey, ...agentNatsPermissions(a.agentId) }));
    const text = natsUsersConf([...this.o.staticUsers, ...agents]);
    if (existsSync(this.o.usersFile) && readFileSync(this.o.usersFile, "utf8") === text) return false;
    // 0640: under systemd nats-server reads it as group berth-nats.
    const tmp = `${this.o.usersFile}.tmp-${process.pid}`;
    writeFileSync(tmp, text, { mode: 0o640 });
    renameSync(tmp, this.o.usersFile);
    reloadNatsNodes([this.o.pidFile ?? []].flat());
    return true;
  }
}

/**
 * SIGHUP to every node of the cluster that runs. A node that is down (one of
 * three stopped, its pid file stale) reads users.conf when it starts again,
 * so it is skipped rather than failing the join or the coordinator's start;
 * only when no node at all could be reloaded is the write an error.
 */
export function reloadNatsNodes(
  pidFiles: string[],
  reload: (pidFile: string) => void = reloadNatsServer,
): void {
  let reloaded = 0;
  let first: unknown;
  for (const pidFile of pidFiles) {
    try {
      reload(pidFile);
      reloaded++;
    } catch (e) {
      first ??= e;
    }
  }
  if (pidFiles.length > 0 && reloaded === 0) throw first;
}

/** SIGHUP to the nats-server whose pid_file this is: it rereads its config (and users.conf). */
export function reloadNatsServer(pidFile: string): void {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, "utf8").trim());
  } catch (e) {
    throw new BerthError("unavailable", `cannot read nats-server's pid file ${pidFile}: ${describeError(e)}`);
  }
  if (!Number.isInteger(pid) || pid <= 1)
    throw new BerthError("unavailable", `nats-server's pid file ${pidFile} holds no pid`);
  try {
    process.kill(pid, "SIGHUP");
  } catch (e) {
    throw new BerthError("unavailable", `cannot reload nats-server (pid ${pid}): ${describeError(e)}`);
  }
}

/** Agents cut off by `berth agent revoke`, kept in cluster_kv and mirrored in memory for the gRPC pool. */
export class RevokedAgents {
  private readonly ids = new Set<string>();

  constructor(private readonly kv: ClusterKv) {}

  /** Reads the revoked agents from the store (at coordinator start). */
  async load(): Promise<this> {
    for (const r of await this.kv.list(REVOKED_PREFIX)) this.ids.add(r.key.slice(REVOKED_PREFIX.length));
    return this;
  }

  has(agentId: string): boolean {
    return this.ids.has(agentId);
  }

  /** Whether the store says so (another coordinator may have revoked it). */
  async isRevoked(agentId: string): Promise<boolean> {
    if (this.ids.has(agentId)) return true;
    const at = await this.kv.get(`${REVOKED_PREFIX}${agentId}`);
    if (at !== undefined) this.ids.add(agentId);
    return at !== undefined;
  }

  /** Marks it revoked in the store; returns when, the first time's time if it already was. */
  async revoke(agentId: string): Promise<string> {
    const at = await this.kv.putIfAbsent(`${REVOKED_PREFIX}${agentId}`, new Date().toISOString());
    this.ids.add(agentId);
    return at;
  }

  /** Another coordinator revoked it (its NATS broadcast). */
  note(agentId: string): void {
    this.ids.add(agentId);
  }
}
