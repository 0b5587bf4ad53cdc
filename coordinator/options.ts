import { X509Certificate, createPrivateKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { createSecureContext } from "node:tls";
import { join, resolve } from "node:path";
import { BerthError, describeError } from "../shared/errors.ts";
import type { NatsUser } from "../shared/nats-server.ts";
import type { NatsCredentials } from "../shared/subjects.ts";
import type { ClusterRegistryAccess } from "../shared/fleet.ts";
import {
  checkClusterRegistry,
  checkImageGcAfter,
  IMAGE_GC_AFTER_DEFAULT_MS,
  type PipIndex,
} from "./images/index.ts";
import type { StreamRetention } from "./fleet/index.ts";
import { type CostRates, type CostRatesOptions, resolveCostRates } from "./tasks/index.ts";
import { type OidcOptions, checkOidcOptions } from "./sso/index.ts";

/** Coordinator settings, as read from its JSON config file and flags. */
export interface CoordinatorOptions {
  /** Address to listen on. @default "127.0.0.1" */
  host?: string;
  /** @default 8420 */
  port?: number;
  /** URL clients use to reach this coordinator. @default http://<host>:<port> (https:// with `tls`) */
  publicUrl?: string;
  /**
   * Serve the API over HTTPS (HTTP/1.1) with this PEM certificate (chain,
   * server certificate first) and PEM private key: both or neither. Read and
   * checked at start-up. @default none: plain HTTP
   */
  tls?: TlsFiles;
  /** Where state lives. @default "/var/lib/berth" */
  dataDir?: string;
  /** `sqlite:PATH` or `postgres://...`. @default "sqlite:<dataDir>/berth.db" */
  store?: string;
  /**
   * The coordinator's own NATS connection. `caFile`: a PEM CA the server's
   * TLS certificate is checked against (a `tls://` URL; berth up --advertise).
   */
  nats: { url: string; user?: string; password?: string; caFile?: string };
  /**
   * One more address the API is served on, over HTTPS with these PEM files,
   * besides `host`:`port` (berth up --advertise: loopback stays plain HTTP
   * for the local CLI and agent, hosts that join come over TLS). @default none
   */
  alsoListen?: { host: string; port: number; tls: TlsFiles };
  /**
   * NATS for agents. With `usersFile` each agent gets its own nkey user
   * (docs/install.md, "Agent credentials"): the coordinator rewrites that
   * file (nats-server's users.conf: `staticUsers` plus one user per agent)
   * and reloads the server through `pidFile`. `password` is the shared agent
   * user, handed only to agents that send no nkey (older versions); required
   * without `usersFile`. @default the coordinator's url with user "agent"
   */
  agentNats?: {
    url?: string;
    user?: string;
    password?: string;
    usersFile?: string;
    /** One nats-server's pid file, or every node's of a cluster that shares the users file. */
    pidFile?: string | string[];
    staticUsers?: NatsUser[];
  };
  /** How often agents report. @default 5000 */
  heartbeatIntervalMs?: number;
  /** On a store with no workspace yet, write the first admin and join tokens here. @default "<dataDir>/admin-token" and "<dataDir>/join-token" */
  bootstrap?: { adminTokenFile?: string; joinTokenFile?: string };
  /** pino level. @default "info" */
  logLevel?: string;
  /** Retention of the container logs and events streams. @default 7 days / 1 GiB of logs, 30 days of events */
  streams?: StreamRetention;
  /**
   * Key file that seals workspace secrets: 32 bytes, made (0600, directory
   * 0700) on first start when absent. BERTH_SECRETS_KEY (base64 of 32 bytes)
   * wins when set. Every coordinator of one store needs the same key.
   * @default "<dataDir>/keys/secrets.key"
   */
  secretsKeyFile?: string;
  /**
   * Per-deployment host names: a request whose Host is
   * `{deployment_id}.{endpointDomain}` reaches that deployment as
   * `/endpoint/id/{deployment_id}` does (point a wildcard DNS record at the
   * coordinator). Deployment records then carry `host_url`. @default none
   */
  endpointDomain?: string;
  /**
   * Per-second rates for the task cost estimate (docs/api.md "Task cost"):
   * `{cpuCorePerSecond, memoryGibPerSecond, gpuPerSecond: {default, <type>...}, currency}`.
   * @default every rate 0
   */
  costRates?: CostRatesOptions;
  /**
   * Bearer token Prometheus must send to scrape `/metrics` (docs/metrics.md).
   * @default none: `/metrics` is open (it carries cluster aggregates only)
   */
  metricsToken?: string;
  /**
   * Single sign-on by OpenID Connect for the dashboard and `berth login`
   * (docs/sso.md): the provider, its clients and which groups get which role
   * in which workspace. @default none: API tokens only
   */
  oidc?: OidcOptions;
  /** Days container and pool samples are kept. @default 7 */
  metricsRetentionDays?: number;
  /**
   * How long a sandbox or pod create waits for room when the fleet is full
   * and no idle warm container can be stopped for it, before it fails with
   * `resource_exhausted` and the reason (docs/sandboxes.md); 0 refuses at
   * once. Within 0..600000. @default 30000
   */
  placementWaitMs?: number;
  /**
   * Where workspace volumes live: the same path the agents use as their
   * volume root (a shared mount on a fleet; docs/volumes.md). The volume
   * routes read and write files here. @default "<dataDir>/volumes"
   */
  volumeRoot?: string;
  /**
   * The Python package index every pip step of an image build uses (an
   * on-prem mirror on an air-gapped fleet; docs/images.md). @default pip's own (PyPI)
   */
  pipIndex?: PipIndex;
  /**
   * Conda channels (URLs or names) of every micromamba step of an image
   * build, after the image's own (docs/images.md, "micromamba"). @default micromamba's own
   */
  condaChannels?: string[];
  /**
   * The cluster registry built images are pushed to and every agent pulls
   * them from (docs/images.md, "The cluster registry"): `url` is
   * http://host:port, https://host[:port] or host[:port]; the credentials are
   * handed to agents at join and never logged. @default none: built images stay on the agent that built them
   */
  registry?: ClusterRegistryAccess;
  /**
   * Built images no deployment uses and none has asked for this long are
   * removed: their record, their manifest in the cluster registry, and the
   * agents' copies (docs/images.md, "Garbage collection"). @default 7 days
   */
  imageGcAfterMs?: number;
}

export interface TlsFiles {
  certFile: string;
  keyFile: string;
}

export interface ResolvedCoordinatorOptions {
  host: string;
  port: number;
  publicUrl: string;
  tls?: TlsFiles;
  alsoListen?: { host: string; port: number; tls: TlsFiles };
  dataDir: string;
  store: string;
  nats: { url: string; user?: string; password?: string; caFile?: string };
  /** password "" = no shared agent user is handed out. */
  agentNats: NatsCredentials;
  agentNatsUsers?: { usersFile: string; pidFile?: string | string[]; staticUsers: NatsUser[] };
  heartbeatIntervalMs: number;
  bootstrap: { adminTokenFile: string; joinTokenFile: string };
  logLevel: string;
  streams: StreamRetention;
  secretsKeyFile: string;
  endpointDomain?: string;
  costRates: CostRates;
  metricsToken?: string;
  oidc?: OidcOptions;
  metricsRetentionMs: number;
  placementWaitMs: number;
  volumeRoot: string;
  pipIndex?: PipIndex;
  condaChannels?: string[];
  registry?: ClusterRegistryAccess;
  imageGcAfterMs: number;
}

export function resolveCoordinatorOptions(o: CoordinatorOptions): ResolvedCoordinatorOptions {
  if (!o.nats?.url) throw new BerthError("invalid_request", "coordinator config: nats.url is required");
  if (!o.agentNats?.password && !o.agentNats?.usersFile) {
    throw new BerthError(
      "invalid_request",
      "coordinator config: agentNats.usersFile (per-agent NATS users) or agentNats.password (one shared agent user) is required",
    );
  }
  const au = o.agentNats;
  if (au.usersFile && !(au.staticUsers ?? []).some((u) => u.user !== undefined && u.user === o.nats.user)) {
    // The file is rewritten whole: without its own user the coordinator would lock itself out at the first join.
    throw new BerthError(
      "invalid_request",
      "coordinator config: agentNats.staticUsers must hold the coordinator's own NATS user (nats.user) when agentNats.usersFile is set",
    );
  }
  const host = o.host ?? "127.0.0.1";
  const port = o.port ?? 8420;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new BerthError("invalid_request", `coordinator config: port ${port} is not a TCP port`);
  }
  const dataDir = o.dataDir ?? "/var/lib/berth";
  const urlHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
  const heartbeatIntervalMs = o.heartbeatIntervalMs ?? 5000;
  if (!(heartbeatIntervalMs >= 100 && heartbeatIntervalMs <= 60_000)) {
    throw new BerthError(
      "invalid_request",
      "coordinator config: heartbeatIntervalMs must be within 100..60000",
    );
  }
  const tls = o.tls !== undefined ? checkTlsFiles(o.tls) : undefined;
  const publicUrl = (o.publicUrl ?? `${tls ? "https" : "http"}://${urlHost}:${port}`).replace(/\/+$/, "");
  return {
    host,
    port,
    publicUrl,
    ...(tls ? { tls } : {}),
    ...(o.alsoListen ? { alsoListen: checkAlsoListen(o.alsoListen) } : {}),
    dataDir,
    store: o.store ?? `sqlite:${join(dataDir, "berth.db")}`,
    nats: o.nats,
    agentNats: {
      url: au.url ?? o.nats.url,
      user: au.user ?? "agent",
      password: au.password ?? "",
    },
    ...(au.usersFile
      ? {
          agentNatsUsers: {
            usersFile: au.usersFile,
            ...(au.pidFile ? { pidFile: au.pidFile } : {}),
            staticUsers: au.staticUsers ?? [],
          },
        }
      : {}),
    heartbeatIntervalMs,
    bootstrap: {
      adminTokenFile: o.bootstrap?.adminTokenFile ?? join(dataDir, "admin-token"),
      joinTokenFile: o.bootstrap?.joinTokenFile ?? join(dataDir, "join-token"),
    },
    logLevel: o.logLevel ?? "info",
    streams: o.streams ?? {},
    secretsKeyFile: o.secretsKeyFile ?? join(dataDir, "keys", "secrets.key"),
    ...(o.endpointDomain !== undefined ? { endpointDomain: checkEndpointDomain(o.endpointDomain) } : {}),
    ...metricsOptions(o),
    ...(o.oidc !== undefined ? { oidc: checkOidcOptions(o.oidc, publicUrl) } : {}),
    costRates: resolveCostRates(o.costRates),
    placementWaitMs: checkPlacementWait(o.placementWaitMs ?? 30_000),
    volumeRoot: resolve(o.volumeRoot ?? join(dataDir, "volumes")),
    ...(o.pipIndex ? { pipIndex: checkPipIndex(o.pipIndex) } : {}),
    ...(o.condaChannels?.length ? { condaChannels: checkCondaChannels(o.condaChannels) } : {}),
    ...(o.registry ? { registry: checkClusterRegistry(o.registry) } : {}),
    imageGcAfterMs: checkImageGcAfter(o.imageGcAfterMs ?? IMAGE_GC_AFTER_DEFAULT_MS),
  };
}

function checkPlacementWait(v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > 600_000) {
    throw new BerthError(
      "invalid_request",
      `coordinator config: placementWaitMs ${JSON.stringify(v)} must be a whole number of ms within 0..600000`,
    );
  }
  return v;
}

function metricsOptions(
  o: CoordinatorOptions,
): Pick<ResolvedCoordinatorOptions, "metricsToken" | "metricsRetentionMs"> {
  if (o.metricsToken !== undefined && (typeof o.metricsToken !== "string" || o.metricsToken.length < 16)) {
    throw new BerthError(
      "invalid_request",
      "coordinator config: metricsToken must be a string of at least 16 characters",
    );
  }
  const days = o.metricsRetentionDays ?? 7;
  if (typeof days !== "number" || !(days > 0 && days <= 3650)) {
    throw new BerthError(
      "invalid_request",
      `coordinator config: metricsRetentionDays ${days} must be within (0, 3650]`,
    );
  }
  return {
    ...(o.metricsToken !== undefined ? { metricsToken: o.metricsToken } : {}),
    metricsRetentionMs: Math.round(days * 86_400_000),
  };
}

function checkAlsoListen(v: unknown): { host: string; port: number; tls: TlsFiles } {
  const a = (typeof v === "object" && v !== null ? v : {}) as Record<string, unknown>;
  if (typeof a.host !== "string" || a.host.trim() === "")
    throw new BerthError("invalid_request", "coordinator config: alsoListen.host must be an address");
  if (typeof a.port !== "number" || !Number.isInteger(a.port) || a.port < 0 || a.port > 65535)
    throw new BerthError(
      "invalid_request",
      `coordinator config: alsoListen.port ${JSON.stringify(a.port)} is not a TCP port`,
    );
  return { host: a.host, port: a.port, tls: checkTlsFiles(a.tls) };
}

function checkTlsFiles(v: unknown): TlsFiles {
  const t = (typeof v === "object" && v !== null ? v : {}) as Partial<Record<keyof TlsFiles, unknown>>;
  const given = (x: unknown): x is string => typeof x === "string" && x.trim() !== "";
  if (!given(t.certFile) && !given(t.keyFile)) {
    throw new BerthError(
      "invalid_request",
      "coordinator config: tls needs certFile (--tls-cert) and keyFile (--tls-key)",
    );
  }
  if (!given(t.keyFile)) {
    throw new BerthError(
      "invalid_request",
      "coordinator config: tls.certFile (--tls-cert) is set but tls.keyFile (--tls-key), its private key, is missing",
    );
  }
  if (!given(t.certFile)) {
    throw new BerthError(
      "invalid_request",
      "coordinator config: tls.keyFile (--tls-key) is set but tls.certFile (--tls-cert), its certificate, is missing",
    );
  }
  return { certFile: t.certFile, keyFile: t.keyFile };
}

/**
 * The certificate and key an HTTPS server is made with, read and checked:
 * each is PEM, and the key is the certificate's. Errors name the file.
 */
export function loadTlsCredentials(files: TlsFiles): { cert: Buffer; key: Buffer } {
  const read = (path: string, what: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (e) {
      throw new BerthError(
        "invalid_request",
        `cannot read the TLS ${what} file ${path}: ${describeError(e)}`,
      );
    }
  };
  const cert = read(files.certFile, "certificate");
  const key = read(files.keyFile, "key");
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch {
    throw new BerthError(
      "invalid_request",
      `the TLS certificate file ${files.certFile} holds no PEM certificate`,
    );
  }
  let privateKey: ReturnType<typeof createPrivateKey>;
  try {
    privateKey = createPrivateKey(key);
  } catch {
    throw new BerthError(
      "invalid_request",
      `the TLS key file ${files.keyFile} holds no unencrypted PEM private key`,
    );
  }
  if (!x509.checkPrivateKey(privateKey)) {
    throw new BerthError(
      "invalid_request",
      `the TLS key file ${files.keyFile} is not the key of the certificate in ${files.certFile}`,
    );
  }
  try {
    createSecureContext({ cert, key });
  } catch (e) {
    throw new BerthError(
      "invalid_request",
      `cannot use the TLS certificate ${files.certFile} with key ${files.keyFile}: ${describeError(e)}`,
    );
  }
  return { cert, key };
}

const DOMAIN = /^(?=.{1,200}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

function checkEndpointDomain(v: unknown): string {
  const d =
    typeof v === "string"
      ? v
          .trim()
          .toLowerCase()
          .replace(/^\.+|\.+$/g, "")
      : "";
  if (!DOMAIN.test(d)) {
    throw new BerthError(
      "invalid_request",
      `coordinator config: endpointDomain ${JSON.stringify(v)} is not a DNS name (such as apps.example.com)`,
    );
  }
  return d;
}

export function readCoordinatorConfig(path: string): CoordinatorOptions {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as CoordinatorOptions;
  } catch (e) {
    throw new BerthError("invalid_request", `cannot read coordinator config ${path}: ${describeError(e)}`);
  }
}

function checkPipIndex(p: PipIndex): PipIndex {
  const url = (u: unknown, what: string) => {
    if (typeof u !== "string" || !/^https?:\/\/[^\s]+$/.test(u)) {
      throw new BerthError(
        "invalid_request",
        `coordinator config: pipIndex.${what} ${JSON.stringify(u)} is not an http(s) URL`,
      );
    }
    return u;
  };
  const out: PipIndex = {};
  if (p.indexUrl !== undefined) out.indexUrl = url(p.indexUrl, "indexUrl");
  if (p.extraIndexUrls !== undefined)
    out.extraIndexUrls = p.extraIndexUrls.map((u) => url(u, "extraIndexUrls"));
  if (p.trustedHosts !== undefined) {
    out.trustedHosts = p.trustedHosts.map((h) => {
      if (typeof h !== "string" || !/^[A-Za-z0-9.:[\]-]+$/.test(h)) {
        throw new BerthError(
          "invalid_request",
          `coordinator config: pipIndex.trustedHosts ${JSON.stringify(h)} is not a host`,
        );
      }
      return h;
    });
  }
  return out;
}

/** Conda channels: URLs (http, https, file) or channel names, nothing a shell would split. */
function checkCondaChannels(channels: string[]): string[] {
  for (const c of channels) {
    const ok =
      typeof c === "string" &&
      (/^(https?|file):\/\/\S+$/.test(c) || /^[A-Za-z0-9][A-Za-z0-9_.\/-]*$/.test(c));
    if (!ok)
      throw new BerthError(
        "invalid_request",
        `coordinator config: condaChannels entry ${JSON.stringify(c)} is not a channel URL or name`,
      );
  }
  return [...channels];
}
