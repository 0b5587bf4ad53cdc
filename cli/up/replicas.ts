// `berth up --replicas N` (docs/install.md, "Highly available control plane"):
// the pieces a single-machine cluster needs to run N coordinators: N
// nats-server nodes in one JetStream cluster (routes on loopback, streams
// replicated once there are three), and a PostgreSQL store the coordinators
// share (Debian's server, run under the cluster's data dir, unless --store
// names one).

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { chownSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { connect } from "nats";
import { describeError } from "../../shared/errors.ts";
import {
  closeNats,
  jetStreamClusterReady,
  type NatsUser,
  type RunningNats,
  startNatsServer,
} from "../../shared/nats-server.ts";
import { waitFor } from "../../shared/net.ts";
import { natsClusterPorts } from "./cluster-files.ts";
import { postgresReachableDir } from "./store-switch.ts";

export interface UpNatsCluster {
  nodes: RunningNats[];
  /** Every node's client URL, comma-separated: what coordinators and agents connect to. */
  url: string;
  /** Node 1's users.conf, which every node reads (the others through a symlink). */
  usersFile: string;
  /** Every node's pid file: the coordinators reload them all after rewriting users.conf. */
  pidFiles: string[];
  stop(): Promise<void>;
}

export { natsClusterPorts };

/**
 * Starts `n` nats-server nodes under `dir`/node-<i> as one JetStream cluster and waits until it
 * has a leader (before that, a coordinator's start could not create its streams).
 */
export async function startNatsCluster(
  dir: string,
  firstPort: number,
  n: number,
  users: NatsUser[],
  coordinatorUser: { user: string; password: string },
): Promise<UpNatsCluster> {
  const ports = natsClusterPorts(firstPort, n);
  const nodes: RunningNats[] = [];
  const stop = async () => {
    for (const node of nodes.reverse()) await node.stop();
  };
  const usersFile = join(dir, "node-1", "users.conf");
  try {
    for (let i = 0; i < n; i++) {
      nodes.push(
        await startNatsServer({
          dir: join(dir, `node-${i + 1}`),
          port: ports.client[i] as number,
          users,
          serverName: `berth-${i + 1}`,
          cluster: {
            name: "berth",
            port: ports.route[i] as number,
            routes: ports.route.filter((_, j) => j !== i).map((p) => `nats-route://127.0.0.1:${p}`),
          },
          ...(i > 0 ? { sharedUsersFile: usersFile } : {}),
        }),
      );
    }
    const url = nodes.map((node) => node.url).join(",");
    const nc = await connect({
      servers: nodes.map((node) => node.url),
      user: coordinatorUser.user,
      pass: coordinatorUser.password,
    });
    try {
      await jetStreamClusterReady(nc);
    } finally {
      await closeNats(nc);
    }
    return { nodes, url, usersFile, pidFiles: nodes.map((node) => node.pidFile), stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** Debian's PostgreSQL server binaries (/usr/lib/postgresql/<newest>/bin), or undefined. */
export function postgresBinDir(): string | undefined {
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(base, versions[0], "bin") : undefined;
}

export interface UpPostgres {
  url: string;
  /** Where its data lives (postgresReachableDir). */
  dataDir: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Runs PostgreSQL with its data in `dir` (made by initdb on the first start) on a loopback
 * port. Only the local `berth` role may connect, over loopback or the socket in `dir`, without
 * a password: nothing outside this machine reaches it. As root the server runs as the
 * `postgres` system user, since PostgreSQL refuses to run as root.
 */
export async function startUpPostgres(wanted: string, port: number): Promise<UpPostgres> {
  const bin = postgresBinDir();
  if (!bin)
    throw new Error(
      "--replicas needs PostgreSQL: install Debian's server (apt-get install postgresql) or name one with --store postgres://...",
    );
  const asRoot = process.getuid?.() === 0;
  const dir = asRoot ? postgresReachableDir(wanted) : wanted;
  const ids = asRoot
    ? {
        uid: Number(execFileSync("id", ["-u", "postgres"]).toString().trim()),
        gid: Number(execFileSync("id", ["-g", "postgres"]).toString().trim()),
      }
    : {};
  // Each folder made here belongs to the server's user (the first one mkdir made, and those below).
  const first = mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (first && ids.uid !== undefined && ids.gid !== undefined) {
    for (let d = dir; d.length >= first.length; d = dirname(d)) chownSync(d, ids.uid, ids.gid);
  }
  const data = join(dir, "data");
  if (!existsSync(join(data, "PG_VERSION"))) {
    execFileSync(join(bin, "initdb"), ["-D", data, "-U", "berth", "--auth=trust", "-E", "UTF8"], {
      ...ids,
      stdio: "pipe",
    });
  }
  const server = spawn(
    join(bin, "postgres"),
    ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1"],
    { ...ids, stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  server.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-3000);
  });
  const exited = new Promise<void>((r) => server.once("exit", () => r()));
  const stop = async () => {
    if (server.exitCode !== null || server.signalCode !== null) return;
    server.kill("SIGINT"); // fast shutdown: open transactions are rolled back, data is kept
    const kill = setTimeout(() => server.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(kill);
  };
  const url = `postgres://berth@127.0.0.1:${port}/postgres`;
  const pg = (await import("pg")).default;
  try {
    await waitFor(
      async () => {
        if (server.exitCode !== null) throw new Error(`postgres exited: ${stderr.trim()}`);
        const c = new pg.Client({ connectionString: url });
        try {
          await c.connect();
          return true;
        } catch {
          return false;
        } finally {
          await c.end().catch(() => {});
        }
      },
      { timeoutMs: 60_000, intervalMs: 200, what: `PostgreSQL on port ${port}` },
    );
  } catch (e) {
    await stop();
    throw new Error(`cannot start PostgreSQL in ${dir}: ${describeError(e)}`);
  }
  return { url, dataDir: data, process: server, stop };
}

/** Waits for a coordinator's /healthz, failing early when `failed` settles first. */
export async function coordinatorHealthy(url: string, failed: Promise<string>): Promise<void> {
  await Promise.race([
    waitFor(
      async () => {
        const r = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
        return r.ok;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: `the coordinator at ${url}` },
    ),
    failed.then((why) => Promise.reject(new Error(why))),
  ]);
}

/** NATS and the store of a berth up cluster: one nats-server, or a NATS cluster and PostgreSQL. */
export interface UpControlPlane {
  /** What coordinators and agents connect to (every node, comma-separated, for a cluster). */
  natsUrl: string;
  usersFile: string;
  pidFile: string | string[];
  /** The coordinators' store; undefined: the coordinator's own SQLite default. */
  store?: string;
  /** A process whose exit stops berth up (the single nats-server); a cluster's nodes are not. */
  essential?: ChildProcess;
  stop(): Promise<void>;
}

export interface ControlPlaneOptions {
  dataDir: string;
  replicas: number;
  natsPort: number;
  /** --store: the coordinators' store instead of the one berth up runs. */
  store?: string;
  /** PostgreSQL's port when berth up runs it (--replicas without --store). */
  postgresPort: number;
  coordinator: { user: string; password: string };
  /** berth up --advertise: NATS listens on this address, TLS only, with this certificate. */
  advertise?: { host: string; tls: { certFile: string; keyFile: string } };
  print(line: string): void;
}

/**
 * One nats-server (replicas 1), or `replicas` nodes in a JetStream cluster with a PostgreSQL
 * store every coordinator shares. A cluster node that exits is reported, not fatal: the others
 * hold the cluster (streams have three copies), which is what a NATS node failure tests.
 */
export async function startControlPlane(o: ControlPlaneOptions): Promise<UpControlPlane> {
  // The coordinators add each agent's own user when it joins.
  const users = [{ user: o.coordinator.user, password: o.coordinator.password }];
  if (o.replicas === 1) {
    const nats = await startNatsServer({
      dir: join(o.dataDir, "nats"),
      port: o.natsPort,
      users,
      ...(o.advertise ? { host: o.advertise.host, tls: o.advertise.tls } : {}),
    });
    return {
      natsUrl: nats.url,
      usersFile: nats.usersFile,
      pidFile: nats.pidFile,
      ...(o.store ? { store: o.store } : {}),
      essential: nats.process,
      stop: () => nats.stop(),
    };
  }
  if (o.advertise)
    throw new Error("--advertise serves one NATS server: it does not go with --replicas (yet)");
  const nats = await startNatsCluster(join(o.dataDir, "nats"), o.natsPort, o.replicas, users, o.coordinator);
  let stopping = false;
  nats.nodes.forEach((node, i) => {
    node.process.once("exit", (code, signal) => {
      if (!stopping)
        o.print(
          `berth up: NATS node ${i + 1} (${node.url}) exited (code ${code}${signal ? `, ${signal}` : ""})`,
        );
    });
  });
  let pg: UpPostgres | undefined;
  if (!o.store) {
    try {
      pg = await startUpPostgres(join(o.dataDir, "postgres"), o.postgresPort);
      o.print(`berth up: PostgreSQL on 127.0.0.1:${o.postgresPort}, data in ${pg.dataDir}`);
    } catch (e) {
      await nats.stop();
      throw e;
    }
  }
  return {
    natsUrl: nats.url,
    usersFile: nats.usersFile,
    pidFile: nats.pidFiles,
    store: o.store ?? (pg as UpPostgres).url,
    stop: async () => {
      stopping = true;
      await pg?.stop();
      await nats.stop();
    },
  };
}
