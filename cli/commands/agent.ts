import { type Command, InvalidArgumentError } from "commander";
import { parseMemory } from "../edge/args.ts";
import { ApiClient } from "../api-client.ts";
import { formatBytes, printJson, printTable } from "../output.ts";
import { agentEdgeCommands } from "./agent-edge.ts";
import { runUntilSignal } from "./serve-process.ts";

interface AgentJson {
  id: string;
  hostname: string;
  state: string;
  version: string;
  pool: string | null;
  grpc_address: string;
  last_seen_at: string | null;
  capacity: {
    cpu_cores: number;
    memory_bytes: number;
    disk: { free_bytes: number; total_bytes: number };
    gpus: {
      available: boolean;
      reason?: string;
      counts: Record<string, number>;
      drained?: { index: number; uuid: string; model: string; reason: string; since: string }[];
    };
  } | null;
}

interface AgentRunFlags {
  coordinator?: string;
  joinToken?: string;
  caFingerprint?: string;
  dataDir?: string;
  hostname?: string;
  grpcHost?: string;
  grpcPort?: number;
  advertise?: string;
  nodeAddress?: string;
  nvidiaSmi?: string;
  sharedGpus?: string;
  mpsDir?: string;
  logLevel?: string;
  containers?: boolean;
  networkPrefix?: string;
  subnet4?: string;
  subnet6?: string;
  allowPrivate?: string[];
  fleetHost?: string[];
  defaultImage?: string;
  insecureRegistry?: string[];
  imageGcHours: number;
  imageGcUnusedHours: number;
  metricsInterval?: number;
  metricsPort?: number;
  metricsHost?: string;
  pool?: string;
  volumeRoot?: string;
  micromambaBin?: string;
  containerDisk?: number;
  runtime?: string;
  warmRunners?: number;
  warmSandboxes?: number;
}

/** The smallest disk quota: agent/runtime/disk.ts MIN_DISK_BYTES (not imported: the CLI does not load the agent). */
export const MIN_CONTAINER_DISK_BYTES = 16 * 2 ** 20;

/**
 * --container-disk: a size like 50Gi or 512Mi (a plain number is MiB) of at
 * least 16 MiB, or 0 for no quota; checked here so `berth up` stops before
 * it starts anything.
 */
export function parseContainerDisk(v: string): number {
  if (v.trim() === "0") return 0;
  let bytes: number;
  try {
    bytes = parseMemory(v, "--container-disk");
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
  if (bytes < MIN_CONTAINER_DISK_BYTES)
    throw new InvalidArgumentError(
      `--container-disk ${JSON.stringify(v)} must be 0 (no quota) or at least 16Mi`,
    );
  return bytes;
}

function collect(v: string, acc: string[]): string[] {
  return [...acc, v];
}

/** The agent process's module, loaded only by the agent commands that need it (not at `berth --help`). */
export const loadAgentMain = () => import("../../agent/main.ts");

export function agentCommands(program: Command): void {
  const agent = program
    .command("agent")
    .description("run this host's agent, or manage the fleet (`berth agent list`)")
    .option("--coordinator <url>", "coordinator to join")
    .option("--join-token <token>", "join token from the operator")
    .option(
      "--ca-fingerprint <sha256:hex>",
      "the cluster CA's fingerprint (berth up --advertise prints it): an https:// coordinator is trusted through that CA",
    )
    .option("--data-dir <dir>", "agent state directory", "/var/lib/berth-agent")
    .option("--hostname <name>", "name this host reports")
    .option("--grpc-host <host>", "address of the TLS gRPC listener", "0.0.0.0")
    .option("--grpc-port <port>", "port of the TLS gRPC listener", (v) => Number(v), 8421)
    .option("--advertise <host:port>", "address coordinators dial")
    .option(
      "--node-address <ip>",
      "this host's IPv4 address as other agents reach it, for gangs across hosts (default: --advertise's host unless loopback)",
    )
    .option("--nvidia-smi <path>", "nvidia-smi to probe GPUs with")
    .option(
      "--shared-gpus <all|0,1>",
      "GPUs given by memory to several containers through NVIDIA MPS (docs/gpus.md, Shared GPUs)",
    )
    .option("--mps-dir <dir>", "MPS pipes, shared memory and logs of shared GPUs (default /run/berth/mps)")
    .option("--log-level <level>", "log level", "info")
    .option("--no-containers", "only report capacity; do not run containers")
    .option(
      "--network-prefix <p>",
      "names of this agent's bridge/nft table/namespaces (2-6 chars; default bridge berth0)",
    )
    .option("--subnet4 <cidr>", "IPv4 subnet for containers (default 10.209.0.0/16)")
    .option("--subnet6 <cidr>", "IPv6 subnet for containers (default fd62:6572:7468::/64)")
    .option(
      "--allow-private <cidr>",
      "a private CIDR containers may reach (repeatable; private and link-local ranges are closed by default)",
      collect,
      [],
    )
    .option(
      "--fleet-host <addr>",
      "address or CIDR of another fleet host whose berth ports containers never reach (repeatable)",
      collect,
      [],
    )
    .option("--default-image <ref>", "image for containers that name none")
    .option(
      "--insecure-registry <host:port>",
      "registry to pull from over plain HTTP (repeatable)",
      collect,
      [],
    )
    .option("--image-gc-hours <h>", "collect unused images every H hours (0 disables)", (v) => Number(v), 1)
    .option("--image-gc-unused-hours <h>", "remove images unused this many hours", (v) => Number(v), 24)
    .option("--metrics-interval <s>", "seconds between container metrics samples (default 10)", (v) =>
      Number(v),
    )
    .option("--metrics-port <port>", "serve Prometheus /metrics on this port (default: not served)", (v) =>
      Number(v),
    )
    .option("--metrics-host <host>", "address of /metrics (default 127.0.0.1)")
    .option("--pool <name>", "the pool (agent group) this host counts toward (default: default)")
    .option(
      "--volume-root <dir>",
      "where workspace volumes live; the same shared path on every agent (default: DATA_DIR/volumes)",
    )
    .option(
      "--micromamba-bin <path>",
      "a micromamba binary for image builds on bases without one (docs/images.md)",
    )
    .option(
      "--container-disk <size>",
      "each container's disk quota, a sparse file (e.g. 50Gi, 512Mi; 0: no quota; default 50Gi)",
      parseContainerDisk,
    )
    .option(
      "--runtime <name>",
      "the OCI runtime of containers that do not ask for gVisor: runc, crun or runsc (default runc)",
    )
    .option(
      "--warm-runners <n>",
      "runner containers kept started ahead of demand, for fast cold starts of functions (default 0)",
      (v: string) => {
        const n = Number(v);
        if (!/^\d+$/.test(v) || n > 64) throw new InvalidArgumentError("an integer 0..64");
        return n;
      },
    )
    .option(
      "--warm-sandboxes <n>",
      "sandbox containers of the default image kept started ahead of demand, for fast sandbox creates (default 0)",
      (v: string) => {
        const n = Number(v);
        if (!/^\d+$/.test(v) || n > 64) throw new InvalidArgumentError("an integer 0..64");
        return n;
      },
    )
    .action(async (o: AgentRunFlags) => {
      // Loaded here, not at the top: `berth --help` and the other commands never pay for the agent.
      const { resolveAgentOptions, startAgent } = await import("../../agent/main.ts");
      await runUntilSignal("agent", () =>
        startAgent(
          resolveAgentOptions({
            ...(o.coordinator ? { coordinator: o.coordinator } : {}),
            ...(o.joinToken ? { joinToken: o.joinToken } : {}),
            ...(o.caFingerprint ? { caFingerprint: o.caFingerprint } : {}),
            ...(o.dataDir ? { dataDir: o.dataDir } : {}),
            ...(o.hostname ? { hostname: o.hostname } : {}),
            ...(o.grpcHost ? { grpcHost: o.grpcHost } : {}),
            ...(o.grpcPort !== undefined ? { grpcPort: o.grpcPort } : {}),
            ...(o.advertise ? { advertiseAddress: o.advertise } : {}),
            ...(o.nodeAddress ? { nodeAddress: o.nodeAddress } : {}),
            ...(o.nvidiaSmi ? { nvidiaSmi: o.nvidiaSmi } : {}),
            ...(o.sharedGpus ? { sharedGpus: o.sharedGpus } : {}),
            ...(o.mpsDir ? { mpsDir: o.mpsDir } : {}),
            ...(o.logLevel ? { logLevel: o.logLevel } : {}),
            containers: o.containers !== false,
            ...(o.networkPrefix ? { networkPrefix: o.networkPrefix } : {}),
            ...(o.subnet4 ? { subnet4: o.subnet4 } : {}),
            ...(o.subnet6 ? { subnet6: o.subnet6 } : {}),
            ...(o.allowPrivate?.length ? { allowPrivate: o.allowPrivate } : {}),
            ...(o.fleetHost?.length ? { fleetHosts: o.fleetHost } : {}),
            ...(o.defaultImage ? { defaultImage: o.defaultImage } : {}),
            ...(o.insecureRegistry?.length ? { insecureRegistries: o.insecureRegistry } : {}),
            imageGcIntervalMs: Math.round(o.imageGcHours * 3_600_000),
            imageGcUnusedForMs: Math.round(o.imageGcUnusedHours * 3_600_000),
            ...(o.metricsInterval !== undefined ? { metricsIntervalS: o.metricsInterval } : {}),
            ...(o.metricsPort !== undefined ? { metricsPort: o.metricsPort } : {}),
            ...(o.metricsHost ? { metricsHost: o.metricsHost } : {}),
            ...(o.pool ? { pool: o.pool } : {}),
            ...(o.volumeRoot ? { volumeRoot: o.volumeRoot } : {}),
            ...(o.micromambaBin ? { micromambaBin: o.micromambaBin } : {}),
            ...(o.containerDisk !== undefined ? { containerDiskBytes: o.containerDisk } : {}),
            // resolveAgentOptions names the runtimes when this is none of them.
            ...(o.runtime ? { containerRuntime: o.runtime as "runc" | "crun" | "runsc" } : {}),
            ...(o.warmRunners !== undefined ? { warmRunners: o.warmRunners } : {}),
            ...(o.warmSandboxes !== undefined ? { warmSandboxes: o.warmSandboxes } : {}),
            // A debug aid, not a flag (docs/tasks.md, "Batches").
            ...(process.env.BERTH_TASK_TRACE ? { taskTrace: process.env.BERTH_TASK_TRACE } : {}),
          }),
        ),
      );
    });

  agent
    .command("list")
    .description("list the fleet's agents with their capacity (admin token)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ agents: AgentJson[] }>("GET", "/api/v1/agents");
      if (o.json) return printJson(r.agents);
      printTable(
        r.agents.map((a) => ({
          id: a.id,
          hostname: a.hostname,
          pool: a.pool,
          state: a.state.toUpperCase(),
          cpus: a.capacity?.cpu_cores,
          memory: a.capacity ? formatBytes(a.capacity.memory_bytes) : null,
          disk_free: a.capacity ? formatBytes(a.capacity.disk.free_bytes) : null,
          gpus: a.capacity ? gpuSummary(a.capacity.gpus) : null,
          last_seen: a.last_seen_at,
        })),
        ["id", "hostname", "pool", "state", "cpus", "memory", "disk_free", "gpus", "last_seen"],
      );
      const drained = r.agents.flatMap((a) =>
        (a.capacity?.gpus.drained ?? []).map((d) => ({
          agent: a.id,
          gpu: d.index,
          uuid: d.uuid,
          since: d.since,
          reason: d.reason,
        })),
      );
      if (drained.length > 0) {
        process.stdout.write("\ndrained GPUs (no new work is placed on them):\n");
        printTable(drained, ["agent", "gpu", "uuid", "since", "reason"]);
      }
    });

  agent
    .command("revoke")
    .description("cut one agent off NATS and gRPC at once; its re-join is refused (admin token)")
    .argument("<id>", "the agent's id (berth agent list)")
    .option("--json", "print JSON")
    .action(async (id: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ agent_id: string; revoked_at: string; nats: string }>(
        "POST",
        `/api/v1/agents/${encodeURIComponent(id)}/revoke`,
        {},
      );
      if (o.json) return printJson(r);
      process.stdout.write(`revoked agent ${r.agent_id} at ${r.revoked_at}\n`);
      if (r.nats === "shared_user")
        process.stdout.write(
          "note: it joined with the shared agent NATS user, which it still knows: rotate agentNats.password (docs/install.md)\n",
        );
    });

  agentEdgeCommands(agent);

  const jt = agent.command("join-token").description("tokens that let hosts join (admin token)");
  jt.command("create")
    .option("--description <text>", "what the token is for")
    .option("--json", "print JSON")
    .action(async (o: { description?: string; json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ join_token: string; info: { id: string } }>(
        "POST",
        "/api/v1/join-token",
        o.description ? { description: o.description } : {},
      );
      if (o.json) return printJson(r);
      process.stdout.write(`created join token ${r.info.id}\njoin token (shown once): ${r.join_token}\n`);
    });
  jt.command("list")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ join_tokens: Record<string, unknown>[] }>(
        "GET",
        "/api/v1/join-token",
      );
      if (o.json) return printJson(r.join_tokens);
      printTable(r.join_tokens, ["id", "description", "prefix", "created_at", "revoked_at"]);
    });
  jt.command("revoke")
    .argument("<id>")
    .action(async (id: string) => {
      await ApiClient.fromEnv().request("DELETE", `/api/v1/join-token/${encodeURIComponent(id)}`);
      process.stdout.write(`revoked ${id}\n`);
    });
}

function gpuSummary(g: NonNullable<AgentJson["capacity"]>["gpus"]): string {
  const parts = Object.entries(g.counts).map(([t, n]) => `${n}x${t}`);
  if (g.drained?.length) parts.push(`${g.drained.length} drained`);
  if (parts.length) return parts.join(",");
  return g.reason ? `0 (${g.reason.split(":")[0]})` : "0";
}
