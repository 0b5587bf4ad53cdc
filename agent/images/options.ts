import { isAbsolute, resolve } from "node:path";
import { invalid } from "../../shared/errors.ts";
import { type CommandRunner, execaRunner } from "./commands.ts";
import type { AwsEcrKeys, BasicRegistryCredentials } from "./credentials.ts";
import { sigV4EcrLogin } from "./ecr.ts";
import { hostPlatform, type Platform } from "./oci-layout.ts";
import type { PeerBlobs } from "./peer-blobs.ts";
import { parseImageReference } from "./reference.ts";

/** pino-compatible; only what the store calls. */
export interface ImageStoreLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  debug?(obj: object, msg: string): void;
}

/** Exchanges AWS keys for an ECR registry password (user name "AWS"). */
export type EcrLogin = (keys: AwsEcrKeys, registry: string) => Promise<BasicRegistryCredentials>;

export interface ImageStoreOptions {
  /** Directory the store owns, e.g. `<agentDataDir>/images`. */
  root: string;
  /** @default "skopeo" */
  skopeo?: string;
  /** @default "umoci" */
  umoci?: string;
  /** GNU tar, used to unpack layers and look inside archives. @default "tar" */
  tar?: string;
  /** python3, which turns a layer's OCI whiteouts into overlay ones (mknod, setxattr). @default "python3" */
  python?: string;
  /** The base image for `pull(undefined)`; the spec's default is Ubuntu 22.04. @default "docker.io/library/ubuntu:22.04" */
  defaultImage?: string;
  /** `host[:port]` registries that may be reached over plain HTTP or with unverified TLS. @default [] */
  insecureRegistries?: string[];
  /**
   * Treat registries on loopback (localhost, 127.0.0.0/8, ::1) as insecure too,
   * as Docker does: that traffic never leaves the host. @default true
   */
  allowLoopbackHttp?: boolean;
  /** Platform picked from multi-platform images. @default linux and this process's architecture */
  platform?: Platform;
  /** Runs skopeo/umoci/tar. @default execa */
  runner?: CommandRunner;
  /** The HTTP client pulls fetch manifests and blobs with. @default globalThis.fetch */
  fetch?: typeof fetch;
  /** @default 120_000 */
  inspectTimeoutMs?: number;
  /**
   * A tag resolved against its registry (by this process, with the same
   * credentials) less than this long ago is served from the cache without
   * asking the registry again: a container start then costs no registry round
   * trip. A tag moved on the registry is picked up once the window has passed.
   * 0 asks the registry on every pull; Infinity never again once cached
   * (Docker's "if-not-present"). @default 60_000
   */
  tagFreshnessMs?: number;
  /** Bound on one image copy or unpack. @default 3_600_000 */
  transferTimeoutMs?: number;
  /**
   * Exchanges AWS keys for an ECR password; null refuses AWS keys with a clear
   * error (for hosts that must not call AWS). @default sigV4EcrLogin() (calls the ECR API of AWS_REGION)
   */
  ecrLogin?: EcrLogin | null;
  /**
   * The cluster registry (docs/images.md, "The cluster registry"): built
   * images are pushed there (`pushToCluster`), and a pull from its host that
   * brings no credentials uses these. `insecure`: plain HTTP (a loopback host
   * is plain HTTP anyway, see allowLoopbackHttp).
   */
  clusterRegistry?: ClusterRegistry;
  logger?: ImageStoreLogger;
  /** The cluster's other agents, asked for a layer before its registry (peer-blobs.ts). @default none */
  peerBlobs?: PeerBlobs;
  /** Clock for the tag freshness window (tests move it by hand). @default Date.now */
  now?: () => number;
}

export interface ClusterRegistry {
  /** host[:port] */
  host: string;
  insecure?: boolean;
  username?: string;
  password?: string;
  /** A folder with the CA its TLS certificate chains to as ca.crt (skopeo's --cert-dir; berth up --advertise). */
  certDir?: string;
}

export interface ResolvedImageStoreOptions {
  root: string;
  skopeo: string;
  umoci: string;
  tar: string;
  python: string;
  defaultImage: string;
  insecureRegistries: Set<string>;
  allowLoopbackHttp: boolean;
  platform: Platform;
  runner: CommandRunner;
  fetch: typeof fetch;
  inspectTimeoutMs: number;
  tagFreshnessMs: number;
  transferTimeoutMs: number;
  ecrLogin: EcrLogin | undefined;
  clusterRegistry: ClusterRegistry | undefined;
  rootless: boolean;
  logger: ImageStoreLogger;
  peerBlobs: PeerBlobs | undefined;
  now: () => number;
}

const silent: ImageStoreLogger = { info() {}, warn() {} };

export function resolveImageStoreOptions(o: ImageStoreOptions): ResolvedImageStoreOptions {
  if (!o.root || typeof o.root !== "string") throw invalid("image store root is required");
  const root = isAbsolute(o.root) ? o.root : resolve(o.root);
  const defaultImage = o.defaultImage ?? "docker.io/library/ubuntu:22.04";
  parseImageReference(defaultImage);
  const insecure = new Set<string>();
  for (const r of o.insecureRegistries ?? []) {
    const host = r
      .trim()
      .replace(/^https?:\/\//, "")
      .replace(/\/+$/, "");
    if (!host || host.includes("/"))
      throw invalid(`insecure registry ${JSON.stringify(r)} must be host[:port]`);
    insecure.add(host);
  }
  if (o.clusterRegistry?.insecure) insecure.add(o.clusterRegistry.host);
  const positive = (v: number | undefined, d: number, name: string) => {
    const n = v ?? d;
    if (!Number.isFinite(n) || n <= 0) throw invalid(`${name} must be a positive number of milliseconds`);
    return n;
  };
  const nonNegative = (v: number | undefined, d: number, name: string) => {
    const n = v ?? d;
    if (typeof n !== "number" || Number.isNaN(n) || n < 0)
      throw invalid(`${name} must be a number of milliseconds >= 0`);
    return n;
  };
  return {
    root,
    skopeo: o.skopeo ?? "skopeo",
    umoci: o.umoci ?? "umoci",
    tar: o.tar ?? "tar",
    python: o.python ?? "python3",
    defaultImage,
    insecureRegistries: insecure,
    allowLoopbackHttp: o.allowLoopbackHttp ?? true,
    platform: o.platform ?? hostPlatform(),
    runner: o.runner ?? execaRunner,
    fetch: o.fetch ?? globalThis.fetch,
    inspectTimeoutMs: positive(o.inspectTimeoutMs, 120_000, "inspectTimeoutMs"),
    tagFreshnessMs: nonNegative(o.tagFreshnessMs, 60_000, "tagFreshnessMs"),
    transferTimeoutMs: positive(o.transferTimeoutMs, 3_600_000, "transferTimeoutMs"),
    ecrLogin: o.ecrLogin === null ? undefined : (o.ecrLogin ?? sigV4EcrLogin()),
    clusterRegistry: o.clusterRegistry,
    rootless: process.getuid?.() !== 0,
    logger: o.logger ?? silent,
    peerBlobs: o.peerBlobs,
    now: o.now ?? Date.now,
  };
}
