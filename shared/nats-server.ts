import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { join } from "node:path";
import type { NatsConnection } from "nats";
import { sleep } from "./net.ts";

export interface NatsUser {
  /** A password user; `nkey` users (agents, docs/install.md "Agent credentials") have neither. */
  user?: string;
  password?: string;
  /** An nkey user's public key (U...): it proves the seed by signing the server's nonce. */
  nkey?: string;
  /** Subjects the user may publish/subscribe to; omitted means everything. */
  publish?: string[];
  subscribe?: string[];
}

export interface NatsServerOptions {
  dir: string;
  host?: string;
  port: number;
  users: NatsUser[];
  /** Cap on JetStream file storage, e.g. "10G". */
  maxFileStore?: string;
  binary?: string;
  /** Unique per node of a cluster. @default "berth" */
  serverName?: string;
  /** A node of a JetStream cluster (berth up --replicas 3): its route port and its peers' routes. */
  cluster?: NatsClusterOptions;
  /**
   * Another node's users.conf this node reads too (a symlink): one file the coordinators rewrite
   * for every node, each then reloaded through its own pid file.
   */
  sharedUsersFile?: string;
  /**
   * Clients must speak TLS with this PEM certificate and key (berth up --advertise: issued by the
   * cluster CA); the URL is then tls://. @default plain TCP
   */
  tls?: { certFile: string; keyFile: string };
}

export interface NatsClusterOptions {
  /** The cluster's name; the same on every node. */
  name: string;
  /** This node's route port (on the node's host). */
  port: number;
  /** The other nodes' routes, e.g. nats-route://127.0.0.1:6223. */
  routes: string[];
}

// nats-server config is its own syntax; JSON strings are valid there.
const q = (s: string) => JSON.stringify(s);

/**
 * The `users` list nats-server reads from users.conf (included by nats.conf's
 * authorization block), so the coordinator can rewrite it and reload the
 * server when an agent joins or is revoked (coordinator/fleet/agent-nats-users.ts).
 */
export function natsUsersConf(users: NatsUser[]): string {
  const lines = users.map((u) => {
    const perms: string[] = [];
    if (u.publish) perms.push(`publish: { allow: [${u.publish.map(q).join(", ")}] }`);
    if (u.subscribe) perms.push(`subscribe: { allow: [${u.subscribe.map(q).join(", ")}] }`);
    const p = perms.length ? `, permissions: { ${perms.join(", ")} }` : "";
    const who = u.nkey ? `nkey: ${q(u.nkey)}` : `user: ${q(u.user ?? "")}, password: ${q(u.password ?? "")}`;
    return `  { ${who}${p} }`;
  });
  return ["users: [", lines.join(",\n"), "]", ""].join("\n");
}

/** The files of a server started by startNatsServer in `dir`. */
export const natsFiles = (dir: string) => ({
  conf: join(dir, "nats.conf"),
  users: join(dir, "users.conf"),
  pid: join(dir, "nats.pid"),
});

export function natsConfig(o: NatsServerOptions): string {
  return [
    `host: ${q(o.host ?? "127.0.0.1")}`,
    `port: ${o.port}`,
    `server_name: ${q(o.serverName ?? "berth")}`,
    // Task arguments and results travel in messages (MAX_TASK_ARGS_BYTES + headers).
    "max_payload: 8MB",
    `jetstream { store_dir: ${q(join(o.dir, "jetstream"))}${o.maxFileStore ? `, max_file_store: ${q(o.maxFileStore)}` : ""} }`,
    `pid_file: ${q(natsFiles(o.dir).pid)}`,
    ...(o.cluster
      ? [
          // Routes carry no client traffic and no credentials: they stay on the node's host.
          `cluster { name: ${q(o.cluster.name)}, host: ${q(o.host ?? "127.0.0.1")}, port: ${o.cluster.port}, routes: [${o.cluster.routes.map(q).join(", ")}] }`,
        ]
      : []),
    ...(o.tls ? [`tls { cert_file: ${q(o.tls.certFile)}, key_file: ${q(o.tls.keyFile)}, timeout: 5 }`] : []),
    "authorization {",
    // nats-server resolves includes against the config's folder, even absolute ones.
    `  include "users.conf"`,
    "}",
    "",
  ].join("\n");
}

export interface RunningNats {
  url: string;
  /** users.conf and the pid file: what a coordinator needs to manage per-agent users. */
  usersFile: string;
  pidFile: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** Starts nats-server as a child process and resolves once it accepts connections. */
export async function startNatsServer(o: NatsServerOptions): Promise<RunningNats> {
  mkdirSync(o.dir, { recursive: true });
  const files = natsFiles(o.dir);
  const conf = files.conf;
  if (o.sharedUsersFile) {
    rmSync(files.users, { force: true });
    symlinkSync(o.sharedUsersFile, files.users);
  } else {
    writeFileSync(files.users, natsUsersConf(o.users), { mode: 0o600 });
  }
  writeFileSync(conf, natsConfig(o), { mode: 0o600 });
  const host = o.host ?? "127.0.0.1";
  const child = spawn(o.binary ?? "nats-server", ["-c", conf], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  let spawnError: Error | undefined;
  child.once("error", (e) => {
    spawnError = e;
  });

  const deadline = Date.now() + 15_000;
  for (;;) {
    if (spawnError) throw new Error(`cannot start nats-server: ${spawnError.message}`);
    if (child.exitCode !== null) {
      throw new Error(`nats-server exited with code ${child.exitCode}: ${stderr.trim()}`);
    }
    if (await canConnect(host, o.port)) break;
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`nats-server did not listen on ${host}:${o.port} within 15 s: ${stderr.trim()}`);
    }
    await sleep(50);
  }
  return {
    url: `${o.tls ? "tls" : "nats"}://${host.includes(":") ? `[${host}]` : host}:${o.port}`,
    usersFile: files.users,
    pidFile: files.pid,
    process: child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = netConnect({ host, port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

/** Drains a NATS connection, but never waits on a server that is gone. */
export async function closeNats(
  nc: { drain(): Promise<void>; close(): Promise<void>; isClosed(): boolean },
  timeoutMs = 3000,
): Promise<void> {
  if (nc.isClosed()) return;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<void>((r) => {
    timer = setTimeout(r, timeoutMs);
  });
  await Promise.race([nc.drain().catch(() => {}), timedOut]);
  clearTimeout(timer);
  // A drain during a reconnect can settle without closing; close() also ends the reconnect loop.
  if (!nc.isClosed()) await nc.close().catch(() => {});
}

/**
 * After a config reload (SIGHUP, e.g. the agents' users.conf rewritten): waits until JetStream
 * answers this connection (its account info) again, at most `timeoutMs`. During a reload JetStream's
 * API may answer 503 "no responders" for a moment; a start that asked then failed ("cannot start
 * the task service: 503").
 */
export async function jetStreamReady(
  nc: { jetstreamManager(): Promise<{ getAccountInfo(): Promise<unknown> }> },
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  // SIGHUP is handled asynchronously: an answer right after it may come from before the reload.
  await sleep(500);
  for (;;) {
    try {
      await (await nc.jetstreamManager()).getAccountInfo();
      return;
    } catch (e) {
      if (Date.now() >= deadline) throw e;
      await sleep(100);
    }
  }
}

/**
 * Waits until a JetStream cluster has a meta leader: until then its API answers nothing (a
 * timeout) or 503, and a coordinator's start that creates streams fails. A lookup can answer
 * "not found" from the node itself before there is a leader, so the probe makes (and removes)
 * a small in-memory stream, which only the leader can do.
 */
export async function jetStreamClusterReady(nc: NatsConnection, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const name = "BERTH_CLUSTER_READY_PROBE";
  // A value import at the top would load nats in every process that closes a connection (the agent's edge mode too).
  const { StorageType } = await import("nats");
  for (;;) {
    try {
      const jsm = await nc.jetstreamManager({ timeout: 2000 });
      await jsm.streams.add({ name, subjects: ["berth.cluster-ready-probe"], storage: StorageType.Memory });
      await jsm.streams.delete(name);
      return;
    } catch (e) {
      if (Date.now() >= deadline)
        throw new Error(
          `the JetStream cluster elected no leader within ${timeoutMs / 1000} s: ${(e as Error).message}`,
        );
      await sleep(250);
    }
  }
}
