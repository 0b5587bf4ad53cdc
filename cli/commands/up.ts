import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { isIPv4 } from "node:net";
import { join, resolve } from "node:path";
import { type Command, InvalidArgumentError } from "commander";
import { describeError } from "../../shared/errors.ts";
import { sleep, waitFor } from "../../shared/net.ts";
import { ApiClient } from "../api-client.ts";
import { parseContainerDisk } from "./agent.ts";
import { configPath, saveProfile } from "../config.ts";
import { type ManagedChild, spawnBerth } from "../up/child.ts";
import { type SupervisedChild, supervise } from "../up/supervise.ts";
import { loadOrCreateUpCluster, type UpCluster } from "../up/cluster-files.ts";
import { ensurePythonRootfs, importPythonImage, UP_PYTHON_IMAGE } from "../up/python-image.ts";
import { startUpRegistry, type UpRegistry } from "../up/registry.ts";
import { type AdvertisedTls, hostPort, issueAdvertisedTls, parseAdvertise } from "../up/advertise.ts";
// replicas.ts loads nats: imported where berth up runs, so `berth --help` does not (test/cli/bundle.test.ts).
import type { UpControlPlane } from "../up/replicas.ts";

/** The most replicas berth up runs (JetStream keeps at most 5 copies of a stream). */
const MAX_UP_REPLICAS = 5;
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";

interface UpFlags {
  dataDir?: string;
  host: string;
  advertise?: string;
  port?: number;
  natsPort?: number;
  grpcPort?: number;
  profile: string;
  containers?: boolean;
  networkPrefix?: string;
  subnet4?: string;
  subnet6?: string;
  allowPrivate: string[];
  defaultImage?: string;
  pythonRootfs?: string;
  pipIndexUrl?: string;
  pipExtraIndexUrl: string[];
  pipTrustedHost: string[];
  condaChannel: string[];
  micromambaBin?: string;
  registry?: string;
  registryUser?: string;
  registryPort?: number;
  imageGcAfter?: number;
  replicas: number;
  store?: string;
  postgresPort?: number;
  containerDisk?: string;
  warmRunners?: string;
  warmSandboxes?: string;
}

const collect = (v: string, all: string[]) => [...all, v];

export function upCommand(program: Command): void {
  program
    .command("up")
    .description(
      "run a whole single-machine cluster in the foreground: nats-server, a coordinator and an agent",
    )
    .option("--data-dir <dir>", "where all cluster state lives (default: $BERTH_DATA_DIR or ~/.berth/up)")
    .option("--host <host>", "address the coordinator listens on", "127.0.0.1")
    .option(
      "--advertise <addr>",
      "also serve the API, NATS and the cluster registry on this address of the host, over TLS, and print the command other hosts join with",
      (v: string) => {
        try {
          return parseAdvertise(v);
        } catch (e) {
          throw new InvalidArgumentError(describeError(e));
        }
      },
    )
    .option("--port <port>", "coordinator HTTP port (default 8420)", (v) => Number(v))
    .option("--nats-port <port>", "NATS port (default 4222)", (v) => Number(v))
    .option("--grpc-port <port>", "agent gRPC port (default 8421)", (v) => Number(v))
    .option("--profile <name>", "CLI profile to save the URL and admin token to", "default")
    .option("--no-containers", "the agent only reports capacity")
    .option("--network-prefix <p>", "the agent's network names (see berth agent --help)")
    .option("--subnet4 <cidr>", "the agent's IPv4 container subnet")
    .option("--subnet6 <cidr>", "the agent's IPv6 container subnet")
    .option(
      "--allow-private <cidr>",
      "a private CIDR containers may reach (repeatable; see berth agent --help)",
      collect,
      [],
    )
    .option(
      "--default-image <ref>",
      "image for functions that name none (default: a Debian python3 image built once)",
    )
    .option(
      "--python-rootfs <dir>",
      "use this rootfs (with python3) for the default image instead of building one",
    )
    .option("--pip-index-url <url>", "package index of every pip step of image builds (an on-prem mirror)")
    .option("--pip-extra-index-url <url>", "another package index for image builds (repeatable)", collect, [])
    .option(
      "--pip-trusted-host <host>",
      "a package index host pip may reach without verified TLS (repeatable)",
      collect,
      [],
    )
    .option(
      "--conda-channel <url>",
      "a conda channel of every micromamba step of image builds (repeatable)",
      collect,
      [],
    )
    .option("--micromamba-bin <path>", "a micromamba binary for image builds on bases without one")
    .option(
      "--container-disk <size>",
      "the agent's per-container disk quota (see berth agent --help)",
      (v: string) => {
        parseContainerDisk(v); // checked here, so a typo stops berth up before it starts anything
        return v.trim();
      },
    )
    .option(
      "--warm-runners <n>",
      "runner containers the agent keeps started ahead of demand (see berth agent --help)",
      (v: string) => {
        if (!/^\d+$/.test(v) || Number(v) > 64) throw new InvalidArgumentError("an integer 0..64");
        return v;
      },
    )
    .option(
      "--warm-sandboxes <n>",
      "sandbox containers the agent keeps started ahead of demand (see berth agent --help)",
      (v: string) => {
        if (!/^\d+$/.test(v) || Number(v) > 64) throw new InvalidArgumentError("an integer 0..64");
        return v;
      },
    )
    .option(
      "--registry <url>",
      "push built images to this registry instead of running one (password from $BERTH_REGISTRY_PASSWORD)",
    )
    .option("--registry-user <name>", "the --registry user name")
    .option(
      "--registry-port <port>",
      "port of the cluster registry berth up runs (default: kept from the first start)",
      (v) => Number(v),
    )
    .option(
      "--image-gc-after <duration>",
      "remove built images no deployment uses and unused this long (90s, 30m, 12h, 7d; default 7d)",
      parseGcAge,
    )
    .option(
      "--replicas <n>",
      `coordinators and NATS nodes (1..${MAX_UP_REPLICAS}); more than 1: a NATS cluster and PostgreSQL (docs/install.md)`,
      parseReplicas,
      1,
    )
    .option("--store <url>", "the coordinators' store (postgres://...) instead of the one berth up runs")
    .option(
      "--postgres-port <port>",
      "PostgreSQL's port with --replicas (default: kept from the first start)",
      (v) => Number(v),
    )
    .action(async (o: UpFlags) => {
      process.exitCode = await up(o);
    });
}

async function up(o: UpFlags): Promise<number> {
  const dataDir = o.dataDir ?? process.env.BERTH_DATA_DIR ?? join(homedir(), ".berth", "up");
  let cluster: UpCluster;
  try {
    cluster = loadOrCreateUpCluster(
      dataDir,
      {
        ...(o.port !== undefined ? { coordinatorPort: o.port } : {}),
        ...(o.natsPort !== undefined ? { natsPort: o.natsPort } : {}),
        ...(o.grpcPort !== undefined ? { agentGrpcPort: o.grpcPort } : {}),
        ...(o.postgresPort !== undefined ? { postgresPort: o.postgresPort } : {}),
      },
      o.replicas,
      { store: o.store !== undefined },
    );
  } catch (e) {
    process.stderr.write(`berth up: ${describeError(e)}\n`);
    return 1;
  }
  if (o.advertise && (o.replicas > 1 || !isLoopbackHost(o.host))) {
    process.stderr.write(
      o.replicas > 1
        ? "berth up: --advertise serves one coordinator and one NATS server: it does not go with --replicas\n"
        : `berth up: --advertise serves the API on ${o.advertise} itself (HTTPS); leave --host at 127.0.0.1\n`,
    );
    return 1;
  }
  const coordinatorPorts = Array.from({ length: o.replicas }, (_, i) => cluster.coordinatorPort + i);
  const print = (line: string) => process.stdout.write(`${line}\n`);
  const children: SupervisedChild[] = [];
  let nats: UpControlPlane | undefined;
  let registry: UpRegistry | undefined;
  let shuttingDown = false;

  // Built before anything starts, so a failure leaves nothing half up.
  let pythonRootfs: string | undefined;
  if (o.containers !== false && !o.defaultImage) {
    try {
      pythonRootfs = await ensurePythonRootfs(
        o.pythonRootfs ?? join(dataDir, "images", "python-rootfs"),
        print,
      );
    } catch (e) {
      process.stderr.write(`berth up: ${describeError(e)}\n`);
      return 1;
    }
  }

  // Ctrl-C reaches the whole process group: children may exit before we do.
  let signalled = false;
  const shutdown = async (code: number): Promise<number> => {
    if (shuttingDown) return code;
    shuttingDown = true;
    // In start order: the coordinator stops the containers it runs through the agent, then the agent goes.
    for (const c of children) await c.stop();
    await registry?.stop();
    await nats?.stop();
    print(code === 0 ? "berth up: stopped" : "berth up: stopped after an error");
    return code;
  };

  const coordDir = join(dataDir, "coordinator");
  // --advertise: a server certificate of the cluster CA for the API, NATS and the registry on that address.
  let advertised: AdvertisedTls | undefined;
  if (o.advertise) {
    try {
      mkdirSync(coordDir, { recursive: true, mode: 0o700 });
      advertised = await issueAdvertisedTls(
        o.store ?? `sqlite:${join(coordDir, "berth.db")}`,
        join(dataDir, "tls"),
        o.advertise,
      );
    } catch (e) {
      process.stderr.write(`berth up: ${describeError(e)}\n`);
      return 1;
    }
  }
  const advertisedTls = advertised
    ? { host: advertised.host, tls: { certFile: advertised.certFile, keyFile: advertised.keyFile } }
    : undefined;

  const { coordinatorHealthy, startControlPlane } = await import("../up/replicas.ts");
  try {
    nats = await startControlPlane({
      dataDir,
      replicas: o.replicas,
      natsPort: cluster.natsPort,
      ...(o.store ? { store: o.store } : {}),
      postgresPort: cluster.postgresPort,
      coordinator: { user: "coordinator", password: cluster.natsCoordinatorPassword },
      ...(advertisedTls ? { advertise: advertisedTls } : {}),
      print,
    });
  } catch (e) {
    process.stderr.write(
      `berth up: cannot start nats-server on ${advertised ? hostPort(advertised.host, cluster.natsPort) : `port ${cluster.natsPort}`}: ${describeError(e)}\n`,
    );
    return 1;
  }

  // The cluster registry built images are pushed to (docs/images.md); the agents get it at join.
  let registryAccess: ClusterRegistryAccess | undefined;
  if (o.registry) {
    registryAccess = {
      url: o.registry,
      username: o.registryUser ?? "",
      password: process.env.BERTH_REGISTRY_PASSWORD ?? "",
    };
  } else {
    try {
      registry = await startUpRegistry(dataDir, {
        ...(o.registryPort !== undefined ? { port: o.registryPort } : {}),
        ...(advertised && advertisedTls ? { advertise: { ...advertisedTls, caPem: advertised.caPem } } : {}),
      });
      registryAccess = registry.access;
    } catch (e) {
      process.stderr.write(`berth up: cannot start the cluster registry: ${describeError(e)}\n`);
      await nats.stop();
      return 1;
    }
  }

  const urlHost = o.host === "0.0.0.0" || o.host === "::" ? "127.0.0.1" : o.host;
  const urls = coordinatorPorts.map((port) => `http://${urlHost}:${port}`);
  const url = urls[0] as string;
  // One config per coordinator: same data dir (code objects, outputs) and store, own port.
  const coordConfigs = coordinatorPorts.map((port, i) => {
    const path = join(dataDir, i === 0 ? "coordinator.json" : `coordinator-${i + 1}.json`);
    writeFileSync(
      path,
      JSON.stringify(
        {
          host: o.host,
          port,
          publicUrl: urls[i],
          dataDir: coordDir,
          ...(nats?.store ? { store: nats.store } : {}),
          volumeRoot: join(dataDir, "volumes"),
          ...pipIndexOf(o),
          ...(o.condaChannel.length > 0 ? { condaChannels: o.condaChannel } : {}),
          registry: registryAccess,
          ...(o.imageGcAfter !== undefined ? { imageGcAfterMs: o.imageGcAfter } : {}),
          nats: {
            url: nats?.natsUrl,
            user: "coordinator",
            password: cluster.natsCoordinatorPassword,
            ...(advertised ? { caFile: advertised.caFile } : {}),
          },
          // Hosts that join come over HTTPS on the advertised address; loopback stays plain HTTP.
          ...(advertised
            ? {
                alsoListen: {
                  host: advertised.host,
                  port,
                  tls: { certFile: advertised.certFile, keyFile: advertised.keyFile },
                },
              }
            : {}),
          // Each agent joins with its own nkey user (docs/install.md, "Agent credentials"); the agent
          // re-joins at every start, so one that held the shared user moves to its own.
          agentNats: {
            url: nats?.natsUrl,
            usersFile: nats?.usersFile,
            pidFile: nats?.pidFile,
            staticUsers: [{ user: "coordinator", password: cluster.natsCoordinatorPassword }],
          },
        },
        null,
        2,
      ),
      { mode: 0o600 },
    );
    return path;
  });

  const onSignal = new Promise<void>((resolve) => {
    const handler = () => {
      signalled = true;
      resolve();
    };
    process.once("SIGINT", handler);
    process.once("SIGTERM", handler);
  });
  // Ctrl-C in a terminal reaches the whole process group: the registry (and nats-server) may die of
  // that SIGINT before this process has handled its own. A child killed by SIGINT/SIGTERM gets a
  // moment for our signal to arrive before its exit counts as a failure (up.test.ts met this).
  const failed = new Promise<string>((resolve) => {
    const failure = async (what: string, code: number | null, signal: NodeJS.Signals | null) => {
      if (signal === "SIGINT" || signal === "SIGTERM") await Promise.race([onSignal, sleep(2000)]);
      resolve(`${what} exited (code ${code}${signal ? `, ${signal}` : ""})`);
    };
    nats?.essential?.once("exit", (code, signal) => void failure("nats-server", code, signal));
    const reg = registry;
    void reg?.exited.then((code) => failure("the cluster registry", code, reg.process.signalCode));
  });
  // A child that dies is started again (cli/up/supervise.ts); one that keeps dying stops the cluster.
  const watch = (name: string, start: () => ManagedChild) => {
    children.push(
      supervise(name, start, {
        print,
        onGiveUp: (why) => {
          if (shuttingDown || signalled) return;
          process.stderr.write(`berth up: ${why}; stopping the cluster\n`);
          void shutdown(1).then((rc) => process.exit(rc));
        },
      }),
    );
  };

  try {
    // One at a time: the first bootstraps the empty store (tokens, keys) the others then find.
    for (const [i, config] of coordConfigs.entries()) {
      const name = o.replicas === 1 ? "coordinator" : `coordinator-${i + 1}`;
      watch(name, () => spawnBerth(name, ["coordinator", "--config", config], print));
      await coordinatorHealthy(urls[i] as string, failed);
    }
  } catch (e) {
    process.stderr.write(`berth up: ${describeError(e)}\n`);
    return shutdown(1);
  }

  const adminToken = readSecret(join(coordDir, "admin-token"));
  const joinToken = readSecret(join(coordDir, "join-token"));
  if (!adminToken || !joinToken) {
    process.stderr.write(`berth up: the coordinator's bootstrap tokens are missing under ${coordDir}\n`);
    return shutdown(1);
  }
  const api = new ApiClient(url, adminToken);
  try {
    await api.request("GET", "/api/v1/workspace/current");
  } catch (e) {
    process.stderr.write(
      `berth up: the admin token in ${join(coordDir, "admin-token")} does not work: ${describeError(e)}\n`,
    );
    return shutdown(1);
  }

  const agentDir = join(dataDir, "agent");
  watch("agent", () =>
    spawnBerth(
      "agent",
      [
        "agent",
        "--coordinator",
        url,
        "--join-token",
        joinToken,
        "--data-dir",
        agentDir,
        "--volume-root",
        join(dataDir, "volumes"),
        "--grpc-host",
        "127.0.0.1",
        "--grpc-port",
        String(cluster.agentGrpcPort),
        "--advertise",
        `127.0.0.1:${cluster.agentGrpcPort}`,
        // Coordinators dial this agent on loopback; other hosts' agents reach it for gangs at --advertise.
        ...(advertised && isIPv4(advertised.host) ? ["--node-address", advertised.host] : []),
        ...(o.containers === false ? ["--no-containers"] : []),
        ...(o.containers !== false ? ["--default-image", o.defaultImage ?? UP_PYTHON_IMAGE] : []),
        ...(o.networkPrefix ? ["--network-prefix", o.networkPrefix] : []),
        ...(o.subnet4 ? ["--subnet4", o.subnet4] : []),
        ...(o.subnet6 ? ["--subnet6", o.subnet6] : []),
        ...o.allowPrivate.flatMap((c) => ["--allow-private", c]),
        ...(o.micromambaBin ? ["--micromamba-bin", resolve(o.micromambaBin)] : []),
        ...(o.containerDisk ? ["--container-disk", o.containerDisk] : []),
        ...(o.warmRunners ? ["--warm-runners", o.warmRunners] : []),
        ...(o.warmSandboxes ? ["--warm-sandboxes", o.warmSandboxes] : []),
      ],
      print,
    ),
  );
  try {
    await waitFor(
      async () => {
        const idFile = join(agentDir, "identity.json");
        if (!existsSync(idFile)) return false;
        const { agentId } = JSON.parse(readFileSync(idFile, "utf8")) as { agentId: string };
        const { agents } = await api.request<{ agents: { id: string; state: string }[] }>(
          "GET",
          "/api/v1/agents",
        );
        return agents.some((a) => a.id === agentId && a.state === "ready");
      },
      { timeoutMs: 60_000, intervalMs: 300, what: "the agent to report in" },
    );
  } catch (e) {
    process.stderr.write(`berth up: ${describeError(e)}\n`);
    return shutdown(1);
  }

  if (pythonRootfs) {
    try {
      await importPythonImage(join(agentDir, "agent.sock"), pythonRootfs, print);
    } catch (e) {
      process.stderr.write(`berth up: ${describeError(e)}\n`);
      return shutdown(1);
    }
  }

  // The agent's socket too, so `berth agent ps|run|...` on this host find this agent (cli/edge/args.ts).
  const agentSocket = resolve(agentDir, "agent.sock");
  saveProfile(o.profile, { url, token: adminToken, agentSocket });
  print("");
  print("berth is up.");
  print(`  URL:         ${url}`);
  if (urls.length > 1) print(`  coordinators: ${urls.join(" ")}   (any one answers any request)`);
  print(`  admin token: ${adminToken}`);
  if (advertised) {
    const joinUrl = `https://${hostPort(advertised.host, cluster.coordinatorPort)}`;
    print(`  advertised:  ${joinUrl} (API), ${nats.natsUrl} (NATS), ${registryAccess?.url ?? "no registry"}`);
    print(`  CA:          ${advertised.fingerprint}   (${advertised.caFile})`);
    print(`  join token:  ${joinToken}`);
    print(
      "  join another host (as root there; `berth agent` instead of `berth agent join` runs it in the foreground):",
    );
    print(
      `    berth agent join --coordinator ${joinUrl} --join-token ${joinToken} --ca-fingerprint ${advertised.fingerprint}`,
    );
  } else {
    print(
      `  join token:  ${joinToken}   (other hosts: restart with --advertise ADDR, which prints their join command)`,
    );
  }
  print(`  data:        ${dataDir}`);
  print(`  agent:       ${agentSocket}   (berth agent ps|run|... use it)`);
  print(`  profile:     ${o.profile} in ${configPath()} (the CLI and the Python SDK use it)`);
  print(`  try:         curl -H "Authorization: Bearer $TOKEN" ${url}/api/v1/workspace/current`);
  print("Press Ctrl-C to stop.");
  print("");

  const why = await Promise.race([onSignal.then(() => ""), failed]);
  if (why && !signalled) {
    process.stderr.write(`berth up: ${why}; stopping the cluster\n`);
    return shutdown(1);
  }
  return shutdown(0);
}

const isLoopbackHost = (host: string) => host === "localhost" || host === "::1" || host.startsWith("127.");

function readSecret(path: string): string | undefined {
  if (!existsSync(path)) return undefined;
  return readFileSync(path, "utf8").trim() || undefined;
}

/** The coordinator's pipIndex from the --pip-* flags (docs/images.md, "Air-gapped pip"). */
function pipIndexOf(o: UpFlags): {
  pipIndex?: { indexUrl?: string; extraIndexUrls?: string[]; trustedHosts?: string[] };
} {
  const pipIndex = {
    ...(o.pipIndexUrl ? { indexUrl: o.pipIndexUrl } : {}),
    ...(o.pipExtraIndexUrl.length > 0 ? { extraIndexUrls: o.pipExtraIndexUrl } : {}),
    ...(o.pipTrustedHost.length > 0 ? { trustedHosts: o.pipTrustedHost } : {}),
  };
  return Object.keys(pipIndex).length > 0 ? { pipIndex } : {};
}

/** --replicas: how many coordinators and NATS nodes. */
export function parseReplicas(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > MAX_UP_REPLICAS)
    throw new InvalidArgumentError(`${JSON.stringify(v)}: use a whole number from 1 to ${MAX_UP_REPLICAS}`);
  return n;
}

/** --image-gc-after: 90s, 30m, 12h, 7d (or milliseconds) as milliseconds. */
export function parseGcAge(v: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(v.trim());
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
  const ms = m ? Number(m[1]) * unit[(m[2] ?? "ms") as keyof typeof unit] : Number.NaN;
  if (!(ms >= 1000))
    throw new InvalidArgumentError(
      `${JSON.stringify(v)}: use a duration of at least 1s such as 90s, 30m, 12h, 7d`,
    );
  return Math.round(ms);
}
