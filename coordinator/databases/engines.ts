// What each database engine runs (docs/databases.md): the Debian packages its
// image holds, the pod's entrypoint (a POSIX shell script that initialises the
// data directory on the volume the first time, then runs the server in the
// foreground as pid 1's only child), the readiness check run inside the pod,
// and the connection URL handed to the workspace.

import { randomBytes } from "node:crypto";
import { invalid } from "../../shared/errors.ts";
import type { DatabaseEngine } from "./store.ts";

export const DATABASE_ENGINES: readonly DatabaseEngine[] = ["postgres", "redis"];

/** Where the database's volume is mounted in its pod. */
export const DATA_MOUNT = "/var/lib/berth-db";

/**
 * The Debian packages of the one image every engine runs from (built once per
 * workspace through the image builder, then cached): one image for both
 * keeps the first start of the second engine free, and gives functions that
 * want `psql` or `redis-cli` an image that has them.
 */
export const DATABASE_PACKAGES = ["postgresql", "redis-server"];

export function databaseImageCommands(): string[] {
  return [
    "apt-get update -qq",
    `DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${DATABASE_PACKAGES.join(" ")}`,
    "rm -rf /var/lib/apt/lists/*",
  ];
}

export function checkEngine(engine: unknown): DatabaseEngine {
  if (typeof engine !== "string" || !(DATABASE_ENGINES as readonly string[]).includes(engine))
    throw invalid(
      `database engine ${JSON.stringify(engine)} is not one berth runs: use ${DATABASE_ENGINES.join(" or ")}`,
      { field: "engine" },
    );
  return engine as DatabaseEngine;
}

/**
 * Lower-case letters, digits and '-', starting with a letter, at most 40: the
 * name goes into a volume name, a stub name and (upper-cased, '-' as '_') a
 * secret name, and two names must never map to one secret.
 */
export const DATABASE_NAME_RE = /^[a-z][a-z0-9-]{0,39}$/;

export function checkDatabaseName(name: unknown): string {
  if (typeof name !== "string" || !DATABASE_NAME_RE.test(name))
    throw invalid(
      `database name ${JSON.stringify(name)} is not valid: use 1-40 lower-case letters, digits or '-', starting with a letter`,
      { field: "name" },
    );
  return name;
}

/** `DB_<NAME>_URL`: the workspace secret holding the connection URL. */
export function databaseSecretName(name: string): string {
  return `DB_${name.toUpperCase().replace(/-/g, "_")}_URL`;
}

/** The volume holding the database's data. */
export function databaseVolumeName(name: string): string {
  return `db-${name}`;
}

/** The pod stub's name (type pod). */
export function databaseStubName(name: string): string {
  return `database-${name}`;
}

/** The server's port inside its pod. */
export function enginePort(engine: DatabaseEngine): number {
  return engine === "postgres" ? 5432 : 6379;
}

/**
 * The first local port of each engine: a workspace's databases get
 * 127.0.0.1 ports from here up inside its containers (docs/databases.md,
 * "Reaching a database"), the engine's usual port plus 10000.
 */
export function firstLocalPort(engine: DatabaseEngine): number {
  return enginePort(engine) + 10000;
}

/** The lowest free local port of the engine, given the workspace's taken ones. */
export function nextLocalPort(engine: DatabaseEngine, taken: readonly number[]): number {
  const used = new Set(taken);
  let p = firstLocalPort(engine);
  while (used.has(p)) p++;
  if (p > 65535) throw invalid("this workspace has no local port left for another database");
  return p;
}

/** 32 hex characters: nothing a URL, a shell or a config file must escape. */
export function newPassword(): string {
  return randomBytes(16).toString("hex");
}

/** The URL a function uses: the database's local port on 127.0.0.1 in its own container. */
export function connectionUrl(engine: DatabaseEngine, password: string, localPort: number): string {
  return engine === "postgres"
    ? `postgresql://berth:${password}@127.0.0.1:${localPort}/postgres`
    : `redis://default:${password}@127.0.0.1:${localPort}/0`;
}

/** The password back out of a URL this module made; undefined for anything else. */
export function passwordOf(url: string): string | undefined {
  return /^[a-z]+:\/\/[^:/@]+:([0-9a-f]{32})@/.exec(url)?.[1];
}

/**
 * The pod's entrypoint. The password comes from the secret's environment
 * variable (the stub names the secret), never from the arguments, which
 * the agent and `ps` show.
 */
export function engineEntrypoint(engine: DatabaseEngine, secretName: string): string[] {
  const pw = `pw=$(printf '%s' "$${secretName}" | sed -e 's|^[a-z]*://[^:]*:||' -e 's|@.*$||')`;
  const script =
    engine === "postgres"
      ? [
          "set -eu",
          pw,
          `bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)`,
          `data=${DATA_MOUNT}/pgdata`,
          `mkdir -p "$data"`,
          `chown postgres:postgres ${DATA_MOUNT} "$data"`,
          `chmod 700 "$data"`,
          // First start on an empty volume: a cluster whose superuser is berth.
          `if [ ! -s "$data/PG_VERSION" ]; then`,
          `  umask 077; printf '%s\\n' "$pw" > /tmp/berth-pw; chown postgres /tmp/berth-pw`,
          `  runuser -u postgres -- "$bin/initdb" -D "$data" -U berth --pwfile=/tmp/berth-pw -E UTF8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null`,
          "  rm -f /tmp/berth-pw",
          `  printf 'host all all 0.0.0.0/0 scram-sha-256\\n' >> "$data/pg_hba.conf"`,
          "fi",
          `exec runuser -u postgres -- "$bin/postgres" -D "$data" -c listen_addresses='*' -c port=${enginePort(engine)} -c unix_socket_directories=/tmp`,
        ]
      : [
          "set -eu",
          pw,
          `mkdir -p ${DATA_MOUNT}/redis`,
          "umask 077",
          `printf 'requirepass %s\\nbind 0.0.0.0\\nport ${enginePort(engine)}\\nprotected-mode no\\ndir ${DATA_MOUNT}/redis\\nappendonly yes\\n' "$pw" > /tmp/berth-redis.conf`,
          "exec redis-server /tmp/berth-redis.conf",
        ];
  return ["/bin/sh", "-c", script.join("\n")];
}

/** The readiness check, run in the pod: exit 0 once the server answers. */
export function readinessCheck(
  engine: DatabaseEngine,
  password: string,
): { args: string[]; env: Record<string, string> } {
  return engine === "postgres"
    ? { args: ["pg_isready", "-q", "-h", "127.0.0.1", "-p", String(enginePort(engine))], env: {} }
    : {
        args: ["/bin/sh", "-c", `redis-cli -h 127.0.0.1 -p ${enginePort(engine)} ping | grep -qx PONG`],
        // REDISCLI_AUTH: the password stays out of the arguments.
        env: { REDISCLI_AUTH: password },
      };
}
