// The HTTP harness with every optional service of the coordinator wired as
// coordinator/main.ts wires it, for the workspace-scoping test: the log query
// over the real BERTH_LOGS stream, the limits routes, a sandbox service on the
// harness's store with a fake agent, the port proxy (real sandbox port
// targets, a tunnel to a loopback server standing in for the pod) and the
// shell upgrades. Workspace A gets a sandbox with a process, an authorized pod
// and a log line; each carries "canary" so an answer to B that holds it shows.

import { Agent, createServer, request, type Server } from "node:http";
import { connect as netConnect } from "node:net";
import type { AddressInfo } from "node:net";
import { connect as natsConnect } from "nats";
import pino from "pino";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { ensureStreams } from "../../coordinator/fleet/streams.ts";
import { attachShellUpgrades, managedShellTargets } from "../../coordinator/edge/shell.ts";
import { WorkspaceLimitsCache } from "../../coordinator/limits/limits.ts";
import { PortProxy } from "../../coordinator/ports/proxy.ts";
import { SandboxService } from "../../coordinator/sandboxes/index.ts";
import { sandboxPortTargets, sandboxShellTargets } from "../../coordinator/sandboxes/targets.ts";
import { usageOf } from "../../coordinator/scheduler/quota.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { type ContainerLogBatch, logSubjectToken, subjects } from "../../shared/subjects.ts";
import { capacity } from "../containers/fakes.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { type HttpHarness, type MoreAreas, startHttpHarness } from "./harness.ts";
import { botRoutes } from "../../coordinator/bots/index.ts";
import { databasesHttpRoutes } from "../../coordinator/databases/index.ts";
import { limitsHttpRoutes } from "../../coordinator/limits/index.ts";
import { portsHttpRoutes } from "../../coordinator/ports/index.ts";
import { stacksHttpRoutes } from "../../coordinator/stacks/index.ts";
import type { ContainerTable } from "../../coordinator/containers/container-table.ts";
import type { DeploymentService } from "../../coordinator/deployments/service.ts";
import type { TaskHarness } from "../tasks/harness.ts";
import { bearer } from "../helpers/auth.ts";
import { StackService } from "../../coordinator/stacks/service.ts";
import { DeploymentMembers } from "../../coordinator/stacks/deployment-member.ts";
import { BotEngine } from "../../coordinator/bots/engine.ts";
import { DatabaseService } from "../../coordinator/databases/index.ts";
import { BOT_NAME, anyWorkspaceDirectory, TestTasks, upper } from "../bots/helpers.ts";
import { SecretService } from "../../coordinator/secrets/index.ts";
import { VolumeFiles } from "../../coordinator/volumes/volume-files.ts";
import { tempDir } from "../helpers/env.ts";
import { randomKey } from "../secrets/helpers.ts";

export interface ScopingFixture {
  x: HttpHarness;
  sandboxes: SandboxService;
  /** A's database (a record marked running; no pod runs it here). */
  databaseName: string;
  /** The bot engine (bot BOT_NAME in every workspace, tasks answered by the test) and A's session of it. */
  bots: BotEngine;
  botSessionId: string;
  /** A's sandbox (running, process 1 in it) and A's pod (authorized, port 9000 exposed). */
  sandboxId: string;
  podId: string;
  podPort: number;
  /** What the pod's port answers: reaching it means the proxy let the request through. */
  podAnswer: string;
  /** The line stored in BERTH_LOGS for A's container. */
  logLine: string;
  /** Workspace ids the limits routes told caches to forget. */
  limitChanges: string[];
  /** The exposed-port proxy the app serves /port/... with (its upgrades are the caller's to attach). */
  ports: PortProxy;
  /** The app listening on 127.0.0.1 (ports and shell upgrades are served before Fastify). */
  listen(): Promise<string>;
}

/** A loopback HTTP server standing in for the pod's port behind the agent's tunnel. */
async function podUpstream(answer: string): Promise<Server> {
  const server = createServer((_req, res) => res.end(answer));
  // A websocket to the pod's port: accepted, then closed when the client closes.
  server.on("upgrade", (_req, socket) => {
    socket.on("error", () => {});
    socket.write("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n");
    socket.on("data", () => socket.end());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return server;
}

/** An http.Agent whose connections go to the upstream, as a tunnel's would to the container port. */
class TunnelAgent extends Agent {
  constructor(private readonly upstreamPort: number) {
    super({ keepAlive: false });
  }
  override createConnection(): ReturnType<typeof netConnect> {
    return netConnect(this.upstreamPort, "127.0.0.1");
  }
}

export async function startScopingFixture(
  suite: { after: (fn: () => unknown) => void },
  o: {
    /** More services for the app (the route fuzzer's images, volumes, outputs, endpoints), given the fake agent. */
    extra?: (
      h: TaskHarness,
      containers: ContainerTable,
      later: { after: (fn: () => unknown) => void },
      deployments: DeploymentService,
      agent: FakeContainerApi,
      fleet: FleetView,
    ) => Promise<MoreAreas>;
  } = {},
): Promise<ScopingFixture> {
  const agent = new FakeContainerApi({ agentId: "agent-1" });
  const podAnswer = "pod canary answer";
  const limitChanges: string[] = [];
  let sandboxes!: SandboxService;
  let bots!: BotEngine;
  let upstream!: Server;
  let ports!: PortProxy;
  const x = await startHttpHarness(suite, {
    more: async (h, containers, later, deployments) => {
      const log = pino({ level: "silent" });
      await ensureStreams(await h.nc.jetstreamManager());
      const fleet = new FleetView({ minLostAfterMs: 3_600_000 });
      fleet.observe(
        {
          agentId: agent.agentId,
          hostname: agent.agentId,
          version: "t",
          sentAt: Date.now(),
          intervalMs: 600_000,
          grpcAddress: "127.0.0.1:1",
          capacity: capacity(4, 8),
        },
        Date.now(),
      );
      sandboxes = new SandboxService({
        repo: h.store.sandboxes,
        stubs: h.store.stubs,
        fleet,
        agents: { client: () => agent },
        code: {
          open: () => {
            throw new Error("no code in this test");
          },
        },
        publicUrl: "https://berth.example/",
        log,
        sweepIntervalMs: 3_600_000,
        stopGraceMs: 0,
      });
      sandboxes.open();
      later.after(() => sandboxes.close());
      upstream = await podUpstream(podAnswer);
      later.after(() => new Promise((r) => upstream.close(r)));
      const tunnelTo = () => new TunnelAgent((upstream.address() as AddressInfo).port);
      const limitsCache = new WorkspaceLimitsCache({ repo: h.store.limits });
      ports = new PortProxy({
        targets: sandboxPortTargets(h.store.sandboxes, h.store.stubs),
        tunnels: {
          connect: () =>
            new Promise((resolve, reject) => {
              const s = netConnect((upstream.address() as AddressInfo).port, "127.0.0.1");
              s.once("connect", () => resolve(s));
              s.once("error", reject);
            }),
          httpAgent: tunnelTo,
          forget: () => {},
        },
        tokens: h.store.tokens,
        log,
        onActivity: (id) => sandboxes.touch(id),
      });
      bots = new BotEngine({
        sessions: h.store.botSessions,
        bots: anyWorkspaceDirectory,
        tasks: new TestTasks(upper),
        log,
      });
      const extra = o.extra ? await o.extra(h, containers, later, deployments, agent, fleet) : {};
      return {
        ...extra,
        sandboxes,
        routes: [
          limitsHttpRoutes({
            workspaces: h.store.workspaces,
            limits: h.store.limits,
            usage: {
              containers: (ws) =>
                usageOf(containers.live((c) => c.workspaceId === ws).map((c) => c.reservation)),
              pendingTasks: (ws) => h.tasks.pendingTasks(ws),
            },
            onChange: (ws) => {
              limitChanges.push(ws);
              limitsCache.invalidate(ws);
            },
          }),
          portsHttpRoutes(ports),
          { api: [botRoutes(bots)] },
          // Managed databases over the same pods; B's calls must never reach one of A's.
          databasesHttpRoutes(
            new DatabaseService({
              repo: h.store.databases,
              stubs: h.store.stubs,
              pods: sandboxes,
              secrets: new SecretService({ db: h.store.db, key: randomKey() }),
              image: async () => "registry.test/berth/databases:1",
              volumes: new VolumeFiles(tempDir(later)),
              log,
            }),
          ),
          stacksHttpRoutes(
            new StackService({
              repo: h.store.stacks,
              kinds: [
                new DeploymentMembers({
                  deployments,
                  containers: {
                    containersOf: (stubId) => containers.info((c) => c.stubId === stubId),
                    startError: () => undefined,
                  },
                  // No container runs here: nothing answers.
                  probe: async () => undefined,
                }),
              ],
              log,
              // A stack the fuzzer makes from a sampled body ends quickly (nothing runs its containers here).
              defaultReadyTimeoutS: 1,
            }),
          ),
          ...(extra.routes ?? []),
        ],
      };
    },
  });
  const { h, app, containers } = x;
  attachShellUpgrades(app.server, {
    tokens: h.store.tokens,
    targets: [managedShellTargets({ list: () => containers.info() }), sandboxShellTargets(h.store.sandboxes)],
    agents: { client: () => agent },
    log: pino({ level: "silent" }),
  });

  const a = x.a.id;
  const stub = async (name: string, type: string, ports: number[]) =>
    (
      await h.store.stubs.upsert(a, {
        name,
        type,
        config: stubConfig({ handler: "", authorized: true }),
        extra: stubExtra({ ports }),
        objectId: null,
      })
    ).stub;
  const sandbox = await sandboxes.create(a, (await stub("canary-sandbox", "sandbox", [8000])).id);
  const proc = await sandboxes.exec(a, sandbox.sandboxId, { args: ["canary-proc"] });
  // The scoping test names it as process 1.
  if (proc.pid !== 1) throw new Error(`the seeded process is pid ${proc.pid}, not 1`);
  agent.execs.at(-1)?.write("stdout", "canary process output\n");
  const podPort = 9000;
  const pod = await sandboxes.create(a, (await stub("canary-pod", "pod", [podPort])).id, {
    expect: "pod",
    entrypoint: ["canary-server"],
  });

  const databaseName = "canary-db";
  const db = await h.store.databases.insert({
    id: "db-canary",
    workspaceId: a,
    name: databaseName,
    engine: "postgres",
    stubId: "stub-canary-db",
    volume: "db-canary-db",
    secretName: "DB_CANARY_DB_URL",
    localPort: 15432,
    createdAt: new Date().toISOString(),
  });
  if (!db) throw new Error("the canary database exists already");
  await h.store.databases.setState(db.id, { status: "running", podId: null, agentId: null }, db.createdAt);

  const logLine = "canary log line of workspace A";
  const batch: ContainerLogBatch = {
    agentId: agent.agentId,
    workspaceId: a,
    stubId: x.seeded.stubId,
    containerId: x.seeded.containerId,
    taskId: x.seeded.taskId,
    lines: [{ ts: Date.now(), stream: "stdout", line: logLine }],
  };
  // Stored as agents store them: with the agents' credentials, acknowledged by JetStream.
  const agentNc = await natsConnect({
    servers: h.nats.url,
    user: h.nats.agent.user,
    pass: h.nats.agent.password,
  });
  try {
    const subject = subjects.containerLogs(
      batch.agentId,
      logSubjectToken(batch.workspaceId),
      logSubjectToken(batch.stubId),
      logSubjectToken(batch.containerId),
      logSubjectToken(batch.taskId),
    );
    await agentNc.jetstream().publish(subject, JSON.stringify(batch));
  } finally {
    await closeNats(agentNc);
  }

  const botSession = await bots.create(a, BOT_NAME);

  let base: string | undefined;
  return {
    x,
    sandboxes,
    sandboxId: sandbox.sandboxId,
    databaseName,
    bots,
    botSessionId: botSession.id,
    podId: pod.sandboxId,
    podPort,
    podAnswer,
    logLine,
    limitChanges,
    ports,
    async listen() {
      if (!base) {
        await app.listen({ host: "127.0.0.1", port: 0 });
        base = `127.0.0.1:${(app.server.address() as AddressInfo).port}`;
      }
      return base;
    },
  };
}

export interface RawAnswer {
  status: number;
  body: string;
  /** Whether the server switched protocols (a websocket began). */
  upgraded: boolean;
}

/**
 * One request over a real socket to the listening app; with `upgrade`, a
 * websocket handshake, answered either by a plain HTTP refusal or by 101
 * (after which the socket is closed).
 */
export function rawRequest(
  base: string,
  path: string,
  o: { token?: string; upgrade?: boolean } = {},
): Promise<RawAnswer> {
  const [host, port] = base.split(":") as [string, string];
  return new Promise((resolve, reject) => {
    const req = request({
      host,
      port: Number(port),
      agent: false,
      path,
      headers: {
        ...(o.token ? bearer(o.token) : {}),
        ...(o.upgrade
          ? {
              connection: "Upgrade",
              upgrade: "websocket",
              "sec-websocket-version": "13",
              "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
            }
          : {}),
      },
    });
    req.on("upgrade", (res, socket) => {
      // A websocket close frame (masked, as a client's must be): the server answers it and ends
      // the socket. A bare FIN would leave the server's half-open socket holding app.close().
      socket.on("error", () => {});
      socket.on("close", () => resolve({ status: res.statusCode ?? 0, body: "", upgraded: true }));
      socket.write(Buffer.from([0x88, 0x80, 0, 0, 0, 0]));
      socket.resume();
    });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), upgraded: false }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}
