import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { BerthError, describeError } from "../shared/errors.ts";
import type { GpuReport } from "../shared/fleet.ts";
import { GpuInjector } from "./capacity/gpu-injection.ts";
import type { ContainerPublisher } from "./fleet/container-publisher.ts";
import { ContainerHost } from "./host/index.ts";
import { ImageStore } from "./images/index.ts";
import { Network } from "./network/index.ts";
import type { ResolvedAgentOptions } from "./options.ts";
import type { ContainerApi } from "./rpc/container-api.ts";
import { ContainerRuntime } from "./runtime/index.ts";

export interface ContainerSubsystem {
  api: ContainerApi;
  /** Why containers cannot run on this agent, when they cannot. */
  disabledReason?: string;
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
): Promise<ContainerSubsystem> {
  if (!o.containers) return disabled("containers are disabled on this agent (--no-containers)");
  if (process.getuid?.() !== 0) return disabled("the agent is not running as root, so it cannot run containers");
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
      },
      { warn: (message: string) => log.warn(message) },
    );
    const images = new ImageStore({
      root: join(o.dataDir, "images"),
      ...(o.defaultImage ? { defaultImage: o.defaultImage } : {}),
      insecureRegistries: o.insecureRegistries,
      logger: log.child({ area: "images" }),
    });
    const mountsRoot = join(o.dataDir, "mounts");
    mkdirSync(mountsRoot, { recursive: true });
    const host = await ContainerHost.start({
      root: join(o.dataDir, "host"),
      images,
      network,
      runtime: (hooks) =>
        new ContainerRuntime({ root: join(o.dataDir, "containers"), logger: log.child({ area: "runtime" }), ...hooks }),
      gpus,
      gpuInjector: new GpuInjector({ nvidiaSmiPath: o.nvidiaSmi }),
      allowedMountRoots: [mountsRoot],
      logger: log.child({ area: "containers" }),
      onEvent: (e) => {
        const s = e.status;
        publisher()?.event({
          containerId: e.containerId,
          type: e.type,
          at: e.at,
          pid: s.pid,
          ...(s.exitCode !== undefined ? { exitCode: s.exitCode } : {}),
          ...(s.reason ? { reason: s.reason } : {}),
          labels: s.labels,
        });
        log.info({ containerId: e.containerId, exitCode: s.exitCode, reason: s.reason }, `container ${e.type}`);
      },
      onLog: (l) => {
        publisher()?.log({ containerId: l.containerId, stream: l.stream, line: l.line, ts: l.ts, labels: {} });
      },
    });
    const net = network;
    return {
      api: host,
      async close() {
        host.close();
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
    setNetworkPolicy: async () => fail(),
  };
  return { api, disabledReason: reason, close: async () => {} };
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
