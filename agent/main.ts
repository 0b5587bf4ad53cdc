import { mkdirSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { NatsConnection } from "nats";
import pino, { type Logger } from "pino";
import { agentInboxPrefix } from "../shared/agent-nats.ts";
import { COORDINATOR_CLIENT_NAME } from "../shared/cluster-names.ts";
import { BerthError, describeError } from "../shared/errors.ts";
import type { Heartbeat } from "../shared/fleet.ts";
import { readHostId } from "../shared/host-id.ts";
import { closeNats } from "../shared/nats-server.ts";
import { BERTH_VERSION } from "../shared/version.ts";
import { createGpuProbe } from "./capacity/gpu-probe.ts";
import { GpuMonitor } from "./capacity/gpu-health.ts";
import { GpuTelemetryReader } from "./capacity/gpu-telemetry.ts";
import { GpuWatcher } from "./capacity/gpu-watcher.ts";
import { mpsPaths, requireMpsControl } from "./capacity/mps.ts";
import { ensureMpsDaemon } from "./capacity/mps-daemon.ts";
import { KernelLogXidReader } from "./capacity/xid.ts";
import { readHostCapacity } from "./capacity/host.ts";
import { startContainers } from "./containers.ts";
import { askLayerPeers, PeerBlobs, serveBlob } from "./images/index.ts";
import type { ContainerPublisher } from "./fleet/container-publisher.ts";
import { HeartbeatPublisher, withPort } from "./fleet/heartbeat.ts";
import { type AgentIdentity, loadIdentity, saveIdentity } from "./fleet/identity.ts";
import { fetchClusterCa, joinWithRetry, resumeOnce, withRetry } from "./fleet/join-client.ts";
import { type AgentMetrics, startAgentMetrics } from "./metrics/index.ts";
import { LogShipper, ShippingContainerPublisher } from "./logs/index.ts";
import type { ResolvedAgentOptions } from "./options.ts";
import { TunnelServer, tunnelContainers } from "./proxy/index.ts";
import type { AgentApi } from "../api/index.ts";
import { type AgentRpcServer, startAgentRpcServer } from "./rpc/server.ts";
import { fleetDenyOf } from "./network/fleet-hosts.ts";

// The agent process's entry point for `berth agent` (cli/commands/agent.ts),
// the one agent file outside agent/ may import (docs/architecture.md).
export { type AgentOptions, resolveAgentOptions } from "./options.ts";
// `berth agent uninstall` (cli/commands/agent-uninstall.ts) undoes what an agent set up.
export { mountsBelow, type UninstallOptions, uninstallAgent } from "./uninstall.ts";

export interface RunningAgent {
  agentId: string | undefined;
  grpcPort: number | undefined;
  stop(): Promise<void>;
}

/** The agent's composition root: identity, capacity, gRPC, NATS heartbeats. */
export async function startAgent(
  o: ResolvedAgentOptions,
  log: Logger = pino({ level: o.logLevel }),
): Promise<RunningAgent> {
  const startedAt = Date.now();
  mkdirSync(o.dataDir, { recursive: true, mode: 0o700 });
  const hostId = readHostId(o.dataDir);
  const identity = await resolveIdentity(o, log);

  // Telemetry each metrics round; a GPU it finds unhealthy leaves the offered devices at once.
  const xids = new KernelLogXidReader();
  const gpuHealth = new GpuMonitor({
    telemetry: new GpuTelemetryReader({ nvidiaSmiPath: o.nvidiaSmi }),
    xids,
    onChange: (drained) => {
      log.warn({ drained }, drained.length > 0 ? "GPUs drained" : "no GPU drained any more");
      gpu.reassess();
    },
    warn: (message) => log.warn(message),
  });
  let mpsControl: string | undefined;
  if (o.sharedGpus) {
    // No MPS, no shared GPUs: refused here, before any GPU is offered.
    mpsControl = requireMpsControl(process.env.PATH);
    for (const dir of Object.values(mpsPaths(o.mpsDir))) mkdirSync(dir, { recursive: true, mode: 0o755 });
  }
  const gpu = new GpuWatcher({
    probe: createGpuProbe({
      nvidiaSmiPath: o.nvidiaSmi,
      ...(o.sharedGpus ? { sharedGpus: o.sharedGpus } : {}),
    }),
    drained: () => gpuHealth.drained(),
    intervalMs: o.gpuProbeIntervalMs,
    onChange: (r) =>
      log.info({ gpus: r.devices.length, available: r.available, reason: r.reason }, "GPU report changed"),
    onError: (err) => log.warn({ err }, "GPU probe failed"),
  });
  await gpu.start();
  if (mpsControl) {
    // The shared GPUs' MPS daemon, unless one runs already; without it their containers are refused with why.
    const shared = (gpu.current?.devices ?? []).filter((d) => d.shared).map((d) => d.uuid);
    await ensureMpsDaemon({ control: mpsControl, paths: mpsPaths(o.mpsDir) }, shared).then(
      (s) => s.running && log.info({ pid: s.pid, gpus: shared }, "MPS control daemon for the shared GPUs"),
      (err) => log.warn({ err }, "no MPS control daemon: containers on shared GPUs will be refused"),
    );
  }
  const capacity = () => readHostCapacity({ dataDir: o.dataDir, gpu });

  const impl: AgentApi = {
    health: async () => ({
      status: "SERVING",
      agentId: identity?.agentId ?? "",
      version: BERTH_VERSION,
      uptimeMs: Date.now() - startedAt,
    }),
    capacity,
  };
  let publisher: ContainerPublisher | undefined;
  // The cluster registry the coordinator handed over at join, unless this agent was given one.
  const registry = o.clusterRegistry ?? identity?.registry;
  // berth's ports on the coordinator and NATS servers it joined, and on the hosts the operator named: closed to containers.
  const fleet = await fleetDenyOf({
    urls: identity
      ? [identity.coordinator, ...identity.nats.url.split(","), ...(registry ? [registry.url] : [])]
      : [],
    hosts: o.network.fleetHosts,
    ports: [o.grpcPort, o.proxyPort, o.metrics.port],
    warn: (message) => log.warn(message),
  });
  const withFleet = { ...o, network: { ...o.network, fleetHosts: fleet.hosts, fleetPorts: fleet.ports } };
  // A joined agent takes layers from the cluster's other agents before the registry (docs/images.md).
  const peerBlobs = identity
    ? new PeerBlobs({
        self: identity.agentId,
        tls: identity.tls,
        peers: async () => (nc ? askLayerPeers(nc, identity.agentId) : []),
      })
    : undefined;
  const containers = await startContainers(
    {
      ...withFleet,
      ...(registry ? { clusterRegistry: registry } : {}),
      // Registries with certificates of the cluster CA (berth up --advertise) are trusted through it.
      ...(identity ? { clusterCaPem: identity.tls.caPem } : {}),
    },
    log,
    () => gpu.current,
    () => publisher,
    peerBlobs,
  );
  if (containers.disabledReason) log.warn(containers.disabledReason);
  let metrics: AgentMetrics | undefined;
  try {
    metrics = await startAgentMetrics({
      agentId: identity?.agentId ?? o.hostname,
      ...o.metrics,
      nvidiaSmi: o.nvidiaSmi,
      gpuTelemetry: gpuHealth,
      containers: containers.api,
      containersEnabled: !containers.disabledReason,
      capacity,
      warn: (message) => log.warn(message),
    });
  } catch (e) {
    gpu.stop();
    await containers.close();
    throw new BerthError(
      "unavailable",
      `cannot serve /metrics on ${o.metrics.host}:${o.metrics.port}: ${describeError(e)}`,
    );
  }

  let rpc: AgentRpcServer;
  try {
    rpc = await startAgentRpcServer({
      impl,
      containers: containers.api,
      unixSocket: o.unixSocket,
      ...(identity
        ? {
            tcp: {
              host: o.grpcHost,
              port: o.grpcPort,
              tls: identity.tls,
              // Agents' own certificates come from the same CA; only coordinators may call.
              allowedClientNames: [COORDINATOR_CLIENT_NAME],
            },
          }
        : {}),
    });
  } catch (e) {
    await metrics?.stop();
    gpu.stop();
    await containers.close();
    throw new BerthError("unavailable", `cannot serve the agent API: ${describeError(e)}`);
  }
  let tunnel: TunnelServer | undefined;
  const blobs = containers.blobs;
  if (identity) {
    tunnel = await TunnelServer.start({
      host: o.grpcHost,
      port: o.proxyPort,
      tls: identity.tls,
      containers: tunnelContainers(containers.api),
      allowedClientNames: [COORDINATOR_CLIENT_NAME],
      // Layer blobs for the cluster's other agents, to any certificate of the cluster CA.
      ...(blobs
        ? { requests: (req: IncomingMessage, res: ServerResponse) => serveBlob(req, res, blobs) }
        : {}),
      log: log.child({ area: "tunnel" }),
    }).catch(async (e: unknown) => {
      await metrics?.stop();
      gpu.stop();
      await rpc.close();
      await containers.close();
      throw e;
    });
  }

  let heartbeats: HeartbeatPublisher | undefined;
  let logShipper: LogShipper | undefined;
  let nc: NatsConnection | undefined;
  let stopping = false;
  if (identity) {
    const advertised = o.advertiseAddress.replace(/:0$/, `:${rpc.tcpPort}`);
    const proxyAddress = tunnel ? withPort(advertised, tunnel.port) : undefined;
    const build = async (): Promise<Heartbeat> => ({
      agentId: identity.agentId,
      hostname: o.hostname,
      version: BERTH_VERSION,
      sentAt: Date.now(),
      intervalMs: identity.heartbeatIntervalMs,
      grpcAddress: advertised,
      ...(proxyAddress ? { proxyAddress } : {}),
      // Where other agents' gang tunnels reach this host (shared/gang.ts).
      ...(o.nodeAddress ? { nodeAddress: o.nodeAddress } : {}),
      hostId,
      pool: o.metrics.pool,
      capacity: await capacity(),
    });
    heartbeats = new HeartbeatPublisher(identity.agentId, identity.heartbeatIntervalMs, build, log);
    logShipper = new LogShipper({ agentId: identity.agentId });
    const events = new ShippingContainerPublisher(identity.agentId, logShipper);
    heartbeats.start();
    // NATS may be down now; the connection is retried forever in the background.
    void connectNatsForever(identity, log, () => stopping).then((conn) => {
      if (!conn) return;
      nc = conn;
      heartbeats?.attach(conn);
      events.attach(conn);
      metrics?.attach(conn);
      publisher = events;
      containers
        .attachNats(conn, identity.agentId)
        .catch((e) => log.error({ err: describeError(e) }, "cannot start the task bridge"));
    });
  }
  log.info(
    {
      agentId: identity?.agentId,
      socket: o.unixSocket,
      grpcPort: rpc.tcpPort,
      proxyPort: tunnel?.port,
      metricsPort: metrics?.port,
      coordinator: identity?.coordinator,
    },
    identity ? "agent ready" : "agent ready (edge mode: no coordinator)",
  );

  return {
    agentId: identity?.agentId,
    grpcPort: rpc.tcpPort,
    async stop() {
      stopping = true;
      await heartbeats?.stop(true);
      logShipper?.close();
      await metrics?.stop();
      if (nc) await closeNats(nc);
      gpu.stop();
      xids.close();
      await tunnel?.stop();
      await rpc.close();
      await containers.close();
    },
  };
}

/**
 * A host joins once, with the join token; afterwards it resumes with the
 * identity it saved (its certificate signs the request), so revoking the join
 * token stops new joins only and `berth agent revoke` is what cuts a host off.
 */
async function resolveIdentity(o: ResolvedAgentOptions, log: Logger): Promise<AgentIdentity | undefined> {
  const saved = loadIdentity(o.identityFile);
  if (!o.coordinator) return saved;
  const onRetry = (what: string) => (err: BerthError, ms: number) =>
    log.warn(`${what}: ${err.message}; retrying in ${ms} ms`);
  const here = { hostname: o.hostname, version: BERTH_VERSION, grpcAddress: o.advertiseAddress };
  // An identity from before per-agent NATS users holds the shared password: a join (when a token is given) trades it for its own nkey.
  const resumable = saved && saved.coordinator === o.coordinator && (saved.nats.seed || !o.joinToken);
  if (resumable) {
    try {
      const identity = await withRetry(() => resumeOnce(saved, here), { onRetry: onRetry("resume") });
      saveIdentity(o.identityFile, identity);
      log.info({ agentId: identity.agentId }, `resumed as ${identity.agentId} at ${o.coordinator}`);
      return identity;
    } catch (e) {
      // A coordinator that lost its records (or its CA) does not know the agent: a join token, when
      // given, joins it again under its id. A revoked agent (permission_denied) stays cut off.
      const unknown = e instanceof BerthError && (e.code === "not_found" || e.code === "unauthenticated");
      if (!(unknown && o.joinToken)) throw e;
      log.warn(`${(e as BerthError).message}; joining with the join token`);
    }
  }
  if (!o.joinToken) {
    throw new BerthError("invalid_request", `joining ${o.coordinator} needs --join-token`);
  }
  const { caFingerprint } = o;
  const coordinator = o.coordinator;
  const caPem = caFingerprint
    ? await withRetry(() => fetchClusterCa(coordinator, caFingerprint), { onRetry: onRetry("CA") })
    : undefined;
  const identity = await joinWithRetry(
    {
      ...(caPem ? { caPem } : {}),
      coordinator: o.coordinator,
      joinToken: o.joinToken,
      ...(saved && saved.coordinator === o.coordinator ? { agentId: saved.agentId } : {}),
      ...here,
      ...(saved?.nats.seed ? { natsSeed: saved.nats.seed } : {}),
    },
    { onRetry: onRetry("join") },
  );
  saveIdentity(o.identityFile, identity);
  log.info({ agentId: identity.agentId }, `joined ${o.coordinator}`);
  return identity;
}

/** Connects to NATS, retrying until it answers; reconnects are then the client's job. */
async function connectNatsForever(
  id: AgentIdentity,
  log: Logger,
  stopping: () => boolean,
): Promise<NatsConnection | undefined> {
  // Loaded here, not at start: an edge agent (no coordinator) never needs nats.
  const { connect, nkeyAuthenticator } = await import("nats");
  let delay = 500;
  while (!stopping()) {
    try {
      const nc = await connect({
        // A cluster's nodes, comma-separated (berth up --replicas): any one of them lets it in.
        servers: id.nats.url.split(","),
        // Its own nkey user, limited to its subjects and inbox (shared/agent-nats.ts); else the legacy shared user.
        ...(id.nats.seed
          ? {
              authenticator: nkeyAuthenticator(new TextEncoder().encode(id.nats.seed)),
              inboxPrefix: agentInboxPrefix(id.agentId),
            }
          : { user: id.nats.user, pass: id.nats.password }),
        // tls://: berth up --advertise serves NATS with a certificate of the cluster CA it handed over.
        ...(id.nats.url.startsWith("tls://") ? { tls: { ca: id.tls.caPem } } : {}),
        name: id.agentId,
        // Every JetStream publish and pull is a request: no stack captured per request on the task path.
        noAsyncTraces: true,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 1000,
        timeout: 5000,
      });
      log.info({ nats: id.nats.url }, "connected to NATS");
      void (async () => {
        for await (const s of nc.status()) {
          if (s.type === "disconnect") log.warn("lost NATS; reconnecting");
          if (s.type === "reconnect") log.info("reconnected to NATS");
        }
      })();
      return nc;
    } catch (e) {
      log.warn(`cannot connect to NATS at ${id.nats.url}: ${describeError(e)}; retrying in ${delay} ms`);
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10_000);
    }
  }
  return undefined;
}
