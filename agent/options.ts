import { isIPv4 } from "node:net";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { BerthError } from "../shared/errors.ts";
import { type ClusterRegistryAccess, DEFAULT_POOL, POOL_NAME_RE } from "../shared/fleet.ts";
import { parseCaFingerprint } from "../shared/tls-fetch.ts";
import { DEFAULT_MPS_DIR, parseSharedGpus, type SharedGpuSelection } from "./capacity/mps.ts";
import { DEFAULT_SDK_DIR } from "./host/options.ts";
import { parseHostOrCidr, resolveAllowedPrivate } from "./network/egress-guard.ts";
import {
  DEFAULT_CONTAINER_DISK_BYTES,
  isOciRuntimeName,
  MIN_DISK_BYTES,
  OCI_RUNTIMES,
  type OciRuntimeName,
} from "./runtime/index.ts";

export interface AgentOptions {
  /** Coordinator URL to join; omitted for an edge agent with no coordinator. */
  coordinator?: string;
  /** Join token (`bj_...`) from the coordinator's operator. */
  joinToken?: string;
  /**
   * SHA-256 fingerprint of the cluster CA (`sha256:HEX`, as `berth up --advertise` prints it):
   * before joining an https:// coordinator the agent fetches the CA, checks it against this and
   * then trusts that CA alone for the coordinator, NATS and the cluster registry. @default the system's roots
   */
  caFingerprint?: string;
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
  /**
   * This host's IPv4 address as the other agents reach it: the end of gangs'
   * VXLAN tunnels (shared/gang.ts), sent in heartbeats. @default the host of
   * advertiseAddress when that is an IPv4 address and not loopback, else none
   * (this agent then takes no gang of more than one host)
   */
  nodeAddress?: string;
  /**
   * Port of the tunnel coordinators reach container ports through; it
   * listens on grpcHost and is advertised at advertiseAddress's host.
   * 0 picks a free port. @default 0
   */
  proxyPort?: number;
  /** nvidia-smi to probe GPUs with. @default "nvidia-smi" */
  nvidiaSmi?: string;
  /** Seconds between GPU re-fingerprints. @default 60 */
  gpuProbeIntervalS?: number;
  /**
   * GPUs shared by memory through NVIDIA MPS (docs/gpus.md, "Shared GPUs"):
   * "all" or nvidia-smi indexes such as "0,1". @default none
   */
  sharedGpus?: string;
  /** MPS pipes, shared memory and logs of the shared GPUs. @default "/run/berth/mps" */
  mpsDir?: string;
  /** @default "info" */
  logLevel?: string;
  /** Run containers (needs root, runc, nftables). @default true */
  containers?: boolean;
  /**
   * Names of this agent's bridge, nftables table and namespaces. The default
   * gives bridge `berth0` and table `berth`; a second agent on one host needs
   * its own prefix and subnets. 2-6 characters [a-z0-9].
   */
  networkPrefix?: string;
  /** Container subnets. @default "10.209.0.0/16" and "fd62:6572:7468::/64" */
  subnet4?: string;
  subnet6?: string;
  /**
   * Private CIDRs containers may reach (docs/networking.md, "Safe by
   * default"); every other private and every link-local address is
   * unreachable from containers. @default none
   */
  allowPrivate?: string[];
  /**
   * Addresses or CIDRs of the fleet's other hosts (agents, coordinators,
   * NATS nodes): no container reaches berth's ports on them. The coordinator
   * and NATS servers this agent joined are added by themselves. @default none
   */
  fleetHosts?: string[];
  /** Image for containers that name none. @default the image store's default */
  defaultImage?: string;
  /** Registries (host:port) that may be pulled from over plain HTTP; loopback always may. */
  insecureRegistries?: string[];
  /**
   * The cluster registry built images are pushed to and pulled from, with
   * its credentials; normally handed over by the coordinator at join (never
   * logged). @default none
   */
  clusterRegistry?: ClusterRegistryAccess;
  /** How often unused images are collected; 0 disables. @default 1 hour */
  imageGcIntervalMs?: number;
  /** Images unused this long are collected. @default 24 hours */
  imageGcUnusedForMs?: number;
  /** The Python SDK (the directory holding `berth/`) mounted into runner containers. @default the repository's sdk/python */
  sdkDir?: string;
  /** Seconds between container metrics samples (docs/metrics.md). @default 10 */
  metricsIntervalS?: number;
  /** Port of the agent's Prometheus `/metrics`; absent: not served. 0 picks a free port. @default none */
  metricsPort?: number;
  /** Where `/metrics` listens. @default "127.0.0.1" */
  metricsHost?: string;
  /** The pool (agent group) this agent's capacity counts toward in pool metrics. @default "default" */
  pool?: string;
  /**
   * Where workspace volumes live: the same shared path on every agent of a
   * fleet (NFS or the like), local disk on one host (docs/volumes.md). @default <dataDir>/volumes
   */
  volumeRoot?: string;
  /** The operator's micromamba binary for image builds (docs/images.md, "micromamba"). */
  micromambaBin?: string;
  /**
   * Each container's disk quota (its writable layer, a sparse loop-mounted
   * ext4 image; docs/runtime.md, "Disk quota"); 0: no quota. @default 50 GiB
   */
  containerDiskBytes?: number;
  /**
   * The OCI runtime of containers that do not ask for gVisor: runc, crun,
   * or runsc (every container under gVisor); docs/runtime.md, "OCI runtimes". @default "runc"
   */
  containerRuntime?: OciRuntimeName;
  /**
   * Runner containers kept started ahead of demand for cold starts of
   * functions (docs/runtime.md, "Pre-warmed runners"); 0: none. @default 0
   */
  warmRunners?: number;
  /**
   * Sandbox containers of the default image kept started ahead of demand,
   * their process server waiting (docs/sandboxes.md, "Pre-warmed sandboxes"); 0: none. @default 0
   */
  warmSandboxes?: number;
  /**
   * A file the agent appends a debug trace of each task message's life to
   * (docs/tasks.md, "Batches"; `berth agent` takes it from BERTH_TASK_TRACE). @default none (off)
   */
  taskTrace?: string;
}

export interface ResolvedAgentOptions {
  coordinator?: string;
  joinToken?: string;
  caFingerprint?: string;
  dataDir: string;
  hostname: string;
  grpcHost: string;
  grpcPort: number;
  advertiseAddress: string;
  /** Absent: unknown, no gangs across hosts here. */
  nodeAddress?: string;
  proxyPort: number;
  nvidiaSmi: string;
  gpuProbeIntervalMs: number;
  /** GPUs shared through MPS; absent: none. */
  sharedGpus?: SharedGpuSelection;
  mpsDir: string;
  logLevel: string;
  identityFile: string;
  unixSocket: string;
  containers: boolean;
  network: {
    bridge: string;
    table: string;
    namePrefix: string;
    subnet4?: string;
    subnet6?: string;
    allowedPrivateCidrs: string[];
    fleetHosts: string[];
    /** berth's ports on fleet hosts; set once the joined coordinator's and NATS's are known. @default the network's defaults */
    fleetPorts?: number[];
  };
  defaultImage?: string;
  insecureRegistries: string[];
  clusterRegistry?: ClusterRegistryAccess;
  /** The CA handed over at join: registries with its certificates (berth up --advertise) are trusted through it. */
  clusterCaPem?: string;
  imageGcIntervalMs?: number;
  imageGcUnusedForMs?: number;
  sdkDir: string;
  metrics: { intervalMs: number; port?: number; host: string; pool: string };
  volumeRoot: string;
  micromambaBin?: string;
  containerDiskBytes: number;
  containerRuntime: OciRuntimeName;
  warmRunners: number;
  warmSandboxes: number;
  /** The task trace's file; absent: no trace. */
  taskTrace?: string;
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
  const proxyPort = o.proxyPort ?? 0;
  if (!Number.isInteger(proxyPort) || proxyPort < 0 || proxyPort > 65535) {
    throw new BerthError("invalid_request", `--proxy-port ${proxyPort} is not a TCP port`);
  }
  const dataDir = o.dataDir ?? "/var/lib/berth-agent";
  const host = o.hostname ?? hostname();
  const advertiseAddress = o.advertiseAddress ?? `${host}:${grpcPort}`;
  const nodeAddress = resolveNodeAddress(o.nodeAddress, advertiseAddress);
  return {
    ...(o.coordinator ? { coordinator: o.coordinator.replace(/\/+$/, "") } : {}),
    ...(o.joinToken ? { joinToken: o.joinToken } : {}),
    ...(o.caFingerprint ? { caFingerprint: parseCaFingerprint(o.caFingerprint) } : {}),
    dataDir,
    hostname: host,
    grpcHost: o.grpcHost ?? "0.0.0.0",
    grpcPort,
    advertiseAddress,
    ...(nodeAddress ? { nodeAddress } : {}),
    proxyPort,
    nvidiaSmi: o.nvidiaSmi ?? "nvidia-smi",
    gpuProbeIntervalMs: (o.gpuProbeIntervalS ?? 60) * 1000,
    ...(o.sharedGpus ? { sharedGpus: parseSharedGpus(o.sharedGpus) } : {}),
    mpsDir: resolve(o.mpsDir ?? DEFAULT_MPS_DIR),
    logLevel: o.logLevel ?? "info",
    identityFile: join(dataDir, "identity.json"),
    unixSocket: join(dataDir, "agent.sock"),
    containers: o.containers ?? true,
    network: networkNames(o),
    ...(o.defaultImage ? { defaultImage: o.defaultImage } : {}),
    insecureRegistries: o.insecureRegistries ?? [],
    ...(o.clusterRegistry ? { clusterRegistry: o.clusterRegistry } : {}),
    ...(o.imageGcIntervalMs !== undefined ? { imageGcIntervalMs: o.imageGcIntervalMs } : {}),
    ...(o.imageGcUnusedForMs !== undefined ? { imageGcUnusedForMs: o.imageGcUnusedForMs } : {}),
    sdkDir: resolve(o.sdkDir ?? DEFAULT_SDK_DIR),
    metrics: metricsOptions(o),
    volumeRoot: resolve(o.volumeRoot ?? join(dataDir, "volumes")),
    ...(o.micromambaBin ? { micromambaBin: resolve(o.micromambaBin) } : {}),
    containerDiskBytes: containerDiskBytes(o),
    containerRuntime: containerRuntime(o),
    warmRunners: warmPool(o, "warmRunners", "--warm-runners"),
    warmSandboxes: warmPool(o, "warmSandboxes", "--warm-sandboxes"),
    ...(o.taskTrace ? { taskTrace: resolve(o.taskTrace) } : {}),
  };
}

function warmPool(o: AgentOptions, field: "warmRunners" | "warmSandboxes", flag: string): number {
  const n = o[field] ?? 0;
  if (!Number.isInteger(n) || n < 0 || n > 64) {
    throw new BerthError("invalid_request", `${flag} must be an integer 0..64, got ${n}`, { field });
  }
  return n;
}

function metricsOptions(o: AgentOptions): ResolvedAgentOptions["metrics"] {
  const intervalS = o.metricsIntervalS ?? 10;
  if (!Number.isFinite(intervalS) || intervalS < 1 || intervalS > 3600) {
    throw new BerthError("invalid_request", `--metrics-interval ${intervalS} must be 1..3600 seconds`);
  }
  const port = o.metricsPort;
  if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65535)) {
    throw new BerthError("invalid_request", `--metrics-port ${port} is not a TCP port`);
  }
  const pool = o.pool ?? DEFAULT_POOL;
  if (!POOL_NAME_RE.test(pool)) {
    throw new BerthError(
      "invalid_request",
      `--pool ${JSON.stringify(pool)} must be 1-63 characters [a-z0-9_-]`,
    );
  }
  return {
    intervalMs: Math.round(intervalS * 1000),
    ...(port !== undefined ? { port } : {}),
    host: o.metricsHost ?? "127.0.0.1",
    pool,
  };
}

/**
 * --node-address as given (an IPv4 address: VXLAN's underlay here is IPv4),
 * else the advertised host when it is one and not loopback: a loopback or
 * a name is no address another host's kernel can send a tunnel to.
 */
function resolveNodeAddress(given: string | undefined, advertiseAddress: string): string | undefined {
  if (given !== undefined) {
    if (!isIPv4(given) || given.startsWith("127.") || given === "0.0.0.0") {
      throw new BerthError(
        "invalid_request",
        `--node-address ${JSON.stringify(given)} must be this host's IPv4 address as other hosts reach it`,
      );
    }
    return given;
  }
  const advertised = advertiseAddress.replace(/:\d+$/, "");
  return isIPv4(advertised) && !advertised.startsWith("127.") && advertised !== "0.0.0.0"
    ? advertised
    : undefined;
}

function networkNames(o: AgentOptions): ResolvedAgentOptions["network"] {
  const subnets = {
    ...(o.subnet4 ? { subnet4: o.subnet4 } : {}),
    ...(o.subnet6 ? { subnet6: o.subnet6 } : {}),
    ...egressGuardOptions(o),
  };
  if (!o.networkPrefix) return { bridge: "berth0", table: "berth", namePrefix: "brt", ...subnets };
  if (!/^[a-z][a-z0-9]{1,5}$/.test(o.networkPrefix)) {
    throw new BerthError(
      "invalid_request",
      `--network-prefix ${JSON.stringify(o.networkPrefix)} must be 2-6 characters [a-z0-9] starting with a letter`,
    );
  }
  const p = o.networkPrefix;
  return { bridge: `${p}br0`, table: `berth_${p}`, namePrefix: p, ...subnets };
}

function containerRuntime(o: AgentOptions): OciRuntimeName {
  const r = o.containerRuntime ?? "runc";
  if (!isOciRuntimeName(r)) {
    throw new BerthError(
      "invalid_request",
      `the container runtime must be one of ${OCI_RUNTIMES.join(", ")}, got ${JSON.stringify(r)}`,
      { field: "containerRuntime" },
    );
  }
  return r;
}

function containerDiskBytes(o: AgentOptions): number {
  const bytes = o.containerDiskBytes ?? DEFAULT_CONTAINER_DISK_BYTES;
  if (!Number.isSafeInteger(bytes) || (bytes !== 0 && bytes < MIN_DISK_BYTES)) {
    throw new BerthError(
      "invalid_request",
      `--container-disk must be 0 (no quota) or at least ${MIN_DISK_BYTES / 2 ** 20} MiB, got ${bytes} bytes`,
    );
  }
  return bytes;
}

/** --allow-private and --fleet-host, checked now so a typo stops the agent with the flag's name. */
function egressGuardOptions(o: AgentOptions): { allowedPrivateCidrs: string[]; fleetHosts: string[] } {
  const flag = (name: string, fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      throw new BerthError(
        "invalid_request",
        `${name}: ${(e as Error).message.replace(/^network options: /, "")}`,
      );
    }
  };
  const allowedPrivateCidrs = o.allowPrivate ?? [];
  const fleetHosts = o.fleetHosts ?? [];
  flag("--allow-private", () => resolveAllowedPrivate(allowedPrivateCidrs));
  flag("--fleet-host", () => fleetHosts.map((h) => parseHostOrCidr(h, "fleet host")));
  return { allowedPrivateCidrs, fleetHosts };
}
