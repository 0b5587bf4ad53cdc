import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { NatsConnection } from "nats";
import { join } from "node:path";
import type { Logger } from "pino";
import { BerthError, describeError } from "../shared/errors.ts";
import type { GpuReport } from "../shared/fleet.ts";
import { GpuInjector } from "./capacity/gpu-injection.ts";
import type { ContainerPublisher } from "./fleet/container-publisher.ts";
import { ContainerHost } from "./host/index.ts";
import { type BlobHolder, type ClusterRegistry, ImageStore, type PeerBlobs } from "./images/index.ts";
import type { ClusterRegistryAccess } from "../shared/fleet.ts";
import { parseRegistryUrl } from "../shared/registry-client.ts";
import { fetchTrusting } from "../shared/tls-fetch.ts";
import { Network } from "./network/index.ts";
import type { ResolvedAgentOptions } from "./options.ts";
import type { ContainerApi } from "../api/index.ts";
import { ContainerRuntime } from "./runtime/index.ts";
import { TaskRunners } from "./tasks/runners.ts";
import { TaskTrace } from "./tasks/trace.ts";
import { localDatabaseDialer } from "./bridge/db-connect.ts";

export interface ContainerSubsystem {
  api: ContainerApi;
  /** Why containers cannot run on this agent, when they cannot. */
  disabledReason?: string;
  /** What the agent's tunnel serves its peers: the image store's layer blobs (with peerBlobs). */
  blobs?: BlobHolder;
  /** Hands the agent's NATS connection to the task bridge: runner containers may run from then on. */
  attachNats(nc: NatsConnection, agentId: string): Promise<void>;
  /** Stops timers; containers keep running for the next agent process. */
  close(): Promise<void>;
}

/**
 * Builds the container host from its parts. When this host cannot run
 * containers (not root, another agent owns the bridge, no runc...), the agent
 * still runs and reports capacity; container calls then fail with the reason.
 */
export async function startContainers(
  o: ResolvedAgentOptions,
  log: Logger,
  gpus: () => GpuReport | undefined,
  publisher: () => ContainerPublisher | undefined,
  /** The cluster's other agents, asked for layers before the registry (docs/images.md). */
  peerBlobs?: PeerBlobs,
): Promise<ContainerSubsystem> {
  if (!o.containers) return disabled("containers are disabled on this agent (--no-containers)");
  if (process.getuid?.() !== 0)
    return disabled("the agent is not running as root, so it cannot run containers");
  const lock = lockBridge(o.network.bridge);
  if (typeof lock === "string") return disabled(lock);

  let network: Network | undefined;
  try {
    network = await Network.start(
      {
        dataDir: join(o.dataDir, "network"),
        bridge: o.network.bridge,
        table: o.network.table,
        namePrefix: o.network.namePrefix,
        ...(o.network.subnet4 ? { subnet4: o.network.subnet4 } : {}),
        ...(o.network.subnet6 ? { subnet6: o.network.subnet6 } : {}),
        allowedPrivateCidrs: o.network.allowedPrivateCidrs,
        fleetHosts: o.network.fleetHosts,
        ...(o.network.fleetPorts ? { fleetPorts: o.network.fleetPorts } : {}),
        // The local end of gangs' VXLAN tunnels.
        ...(o.nodeAddress ? { nodeAddress: o.nodeAddress } : {}),
      },
      { warn: (message: string) => log.warn(message) },
    );
    const caDir = o.clusterCaPem ? writeClusterCa(join(o.dataDir, "cluster-ca"), o.clusterCaPem) : undefined;
    const images = new ImageStore({
      root: join(o.dataDir, "images"),
      ...(o.defaultImage ? { defaultImage: o.defaultImage } : {}),
      insecureRegistries: o.insecureRegistries,
      ...(o.clusterRegistry ? { clusterRegistry: clusterRegistryOf(o.clusterRegistry, caDir) } : {}),
      ...(o.clusterCaPem ? { fetch: fetchTrusting(o.clusterCaPem) } : {}),
      logger: log.child({ area: "images" }),
      ...(peerBlobs ? { peerBlobs } : {}),
    });
    const blobs = images.blobHolder();
    const mountsRoot = join(o.dataDir, "mounts");
    mkdirSync(mountsRoot, { recursive: true });
    // Log lines carry their container's labels (stub, task, ...) so consumers
    // of the logs stream can attribute them; kept a while after exit for late lines.
    const labelsById = new Map<string, Record<string, string>>();
    // A timed-out or cancelled task's container is stopped by the host the runners belong to.
    let hostRef: ContainerHost | undefined;
    let runtimeRef: ContainerRuntime | undefined;
    const runners = new TaskRunners({
      kill: async (id) => {
        await hostRef?.stopContainer(id, { graceMs: RUNNER_KILL_GRACE_MS, remove: true });
      },
      logger: log.child({ area: "tasks" }),
      // Database pods of this host, dialled for their workspace's containers (docs/databases.md).
      dialDatabase: localDatabaseDialer(() => hostRef),
      // A failed task names the limit it ran into: a full disk quota, refused forks.
      limits: {
        limits: (id) => runtimeRef?.limits(id),
        pidsRefused: (id) => runtimeRef?.pidsRefused(id),
      },
      // Off unless the operator named a file (docs/tasks.md, "Batches"); close() writes its last lines.
      trace: new TaskTrace(o.taskTrace),
    });
    const host = await ContainerHost.start({
      root: join(o.dataDir, "host"),
      images,
      network,
      runtime: (hooks) =>
        (runtimeRef = new ContainerRuntime({
          root: join(o.dataDir, "containers"),
          logger: log.child({ area: "runtime" }),
          diskBytes: o.containerDiskBytes,
          defaultRuntime: o.containerRuntime,
          // Two disks ready: a start takes one and does not wait for mount(8).
          diskPoolSize: CONTAINER_DISK_POOL,
          ...hooks,
        })),
      gpus,
      gpuInjector: new GpuInjector({ nvidiaSmiPath: o.nvidiaSmi, mpsDir: o.mpsDir }),
      allowedMountRoots: [mountsRoot],
      codeDir: join(o.dataDir, "code"),
      bridgeDir: join(o.dataDir, "bridge"),
      sdkDir: o.sdkDir,
      volumeRoot: o.volumeRoot,
      warmRunners: o.warmRunners,
      warmSandboxes: o.warmSandboxes,
      ...(o.micromambaBin ? { micromambaBin: o.micromambaBin } : {}),
      runners,
      logger: log.child({ area: "containers" }),
      onEvent: (e) => {
        const s = e.status;
        labelsById.set(e.containerId, s.labels);
        if (e.type === "exit") setTimeout(() => labelsById.delete(e.containerId), 60_000).unref();
        publisher()?.event({
          containerId: e.containerId,
          type: e.type,
          at: e.at,
          pid: s.pid,
          ...(s.exitCode !== undefined ? { exitCode: s.exitCode } : {}),
          ...(s.reason ? { reason: s.reason } : {}),
          ...(e.type === "exit" ? { memoryBytes: s.memoryBytes } : {}),
          labels: s.labels,
        });
        log.info(
          { containerId: e.containerId, exitCode: s.exitCode, reason: s.reason },
          `container ${e.type}`,
        );
      },
      onLog: (l) => {
        const labels = labelsById.get(l.containerId) ?? {};
        publisher()?.log({ containerId: l.containerId, stream: l.stream, line: l.line, ts: l.ts, labels });
      },
    });
    hostRef = host;
    const net = network;
    const gc = startImageGc(images, imageGcSchedule(o), log.child({ area: "image-gc" }));
    return {
      api: host,
      ...(blobs ? { blobs } : {}),
      attachNats: (nc, agentId) => runners.attach(nc, agentId),
      async close() {
        await runners.stop();
        await gc.stop();
        // Pre-warmed runners and sandboxes hold nothing of anyone's: they go with the agent (a new one starts its own).
        await host
          .drainWarmRunners()
          .catch((e) => log.warn({ err: describeError(e) }, "removing pre-warmed runners"));
        host.close();
        // Containers stay for the next agent; the disks made ahead of demand do not.
        await runtimeRef
          ?.drainDisks()
          .catch((e) => log.warn({ err: describeError(e) }, "unmounting spare disks"));
        await net.shutdown();
        lock.release();
      },
    };
  } catch (e) {
    await network?.shutdown().catch(() => {});
    lock.release();
    log.error({ err: e }, "cannot start the container subsystem");
    return disabled(`the container subsystem failed to start: ${describeError(e)}`);
  }
}

/** Grace a runner gets when its task timed out or was cancelled: the task is over either way. */
const RUNNER_KILL_GRACE_MS = 2_000;
/** Container disks kept made and mounted ahead of demand (agent/runtime/disks.ts). */
const CONTAINER_DISK_POOL = 2;

/** Agent options the periodic image GC reads (the agent's flags fill them). */
export interface ImageGcFields {
  /** How often to collect; 0 disables. @default 3_600_000 (1 h) */
  imageGcIntervalMs?: number;
  /** Images unused this long are removed. @default 86_400_000 (24 h) */
  imageGcUnusedForMs?: number;
}

export interface ImageGcSchedule {
  intervalMs: number;
  unusedForMs: number;
}

export function imageGcSchedule(o: ImageGcFields): ImageGcSchedule {
  const s = { intervalMs: o.imageGcIntervalMs ?? 3_600_000, unusedForMs: o.imageGcUnusedForMs ?? 86_400_000 };
  for (const [k, v] of Object.entries(s)) {
    if (!Number.isFinite(v) || v < 0)
      throw new BerthError("invalid_request", `image gc ${k} must be 0 or more, got ${v}`);
  }
  return s;
}

interface ImageGcLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/**
 * Every `intervalMs`, removes images no container has used for
 * `unusedForMs` (in-use ones and the default image stay; see ImageStore.gc).
 * One run at a time; a failed run is logged and the next one tries again.
 */
export function startImageGc(
  images: Pick<ImageStore, "gc">,
  schedule: ImageGcSchedule,
  log: ImageGcLogger,
): { stop(): Promise<void> } {
  if (schedule.intervalMs === 0) return { stop: async () => {} };
  let running: Promise<void> | undefined;
  const timer = setInterval(() => {
    if (running) return;
    running = images
      .gc({ unusedForMs: schedule.unusedForMs })
      .then(
        (r) => {
          if (r.removedImages.length > 0 || r.freedBytes > 0) {
            log.info(
              { removedImages: r.removedImages, freedBytes: r.freedBytes },
              "periodic image gc freed disk",
            );
          }
        },
        (e: unknown) => log.warn({ err: describeError(e) }, "periodic image gc failed"),
      )
      .finally(() => {
        running = undefined;
      });
  }, schedule.intervalMs);
  // The agent's other work keeps the process alive; GC alone must not.
  timer.unref();
  return {
    // Waits for a run in progress, so the store is not left mid-collection.
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}

function disabled(reason: string): ContainerSubsystem {
  const fail = (): never => {
    throw new BerthError("unavailable", reason);
  };
  const api: ContainerApi = {
    runContainer: async () => fail(),
    stopContainer: async () => fail(),
    getContainer: async () => fail(),
    listContainers: async () => fail(),
    // biome-ignore lint/correctness/useYield: it fails before yielding anything
    streamLogs: async function* () {
      fail();
    },
    exec: async () => fail(),
    pullImage: async () => fail(),
    listImages: async () => fail(),
    removeImage: async () => fail(),
    importImage: async () => fail(),
    gcImages: async () => fail(),
    setNetworkPolicy: async () => fail(),
    exposePort: async () => fail(),
    hasCode: async () => fail(),
    putCode: async () => fail(),
  };
  return { api, disabledReason: reason, attachNats: async () => {}, close: async () => {} };
}

/**
 * One agent per bridge: a second agent on the same host would rewrite the
 * first one's nftables tables. The pid file lives in /run, which a reboot clears.
 */
function lockBridge(bridge: string): { release(): void } | string {
  const dir = "/run/berth";
  const path = join(dir, `bridge-${bridge}.pid`);
  mkdirSync(dir, { recursive: true });
  try {
    const pid = Number(readFileSync(path, "utf8"));
    if (pid && pid !== process.pid) {
      try {
        process.kill(pid, 0);
        return `bridge ${bridge} belongs to another agent (pid ${pid}); give this one its own --network-prefix and --subnet4/--subnet6 to run containers`;
      } catch {
        // stale: its agent is gone
      }
    }
  } catch {
    // no lock yet
  }
  writeFileSync(path, String(process.pid));
  return {
    release() {
      try {
        if (Number(readFileSync(path, "utf8")) === process.pid) rmSync(path, { force: true });
      } catch {}
    },
  };
}

/** The image store's view of the cluster registry (docs/images.md, "The cluster registry"). */
function clusterRegistryOf(r: ClusterRegistryAccess, certDir: string | undefined): ClusterRegistry {
  const { host, insecure } = parseRegistryUrl(r.url);
  return { host, insecure, username: r.username, password: r.password, ...(certDir ? { certDir } : {}) };
}

/** The cluster CA as skopeo's --cert-dir wants it (DIR/ca.crt); the folder. */
function writeClusterCa(dir: string, caPem: string): string {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeFileSync(join(dir, "ca.crt"), caPem, { mode: 0o644 });
  return dir;
}
