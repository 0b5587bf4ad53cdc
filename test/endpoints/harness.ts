// The endpoint invocation path over a real task service (nats-server,
// SQLite), with fakes for the deployment service and the container manager,
// and a tunnel that dials real local HTTP servers standing in for
// `berth.runtime.http_runner` in containers.

import { Agent, createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect as netConnect, type AddressInfo, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { EndpointDispatcher } from "../../coordinator/endpoints/dispatch.ts";
import type {
  DeploymentInfo,
  DeploymentTargets,
  EndpointContainer,
  EndpointContainers,
  ResolvedDeployment,
  TunnelDialer,
} from "../../coordinator/endpoints/types.ts";
import { attachEndpointUpgrades } from "../../coordinator/endpoints/websocket.ts";
import { attachEndpointHostRewrite } from "../../coordinator/endpoints/host-names.ts";
import { endpointRoutes } from "../../coordinator/endpoints/routes.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import type { DeploymentWithStub } from "../../coordinator/deployments/store.ts";
import { BerthError } from "../../shared/errors.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import { buildTaskApp, startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "../tasks/harness.ts";
import { teardownStack } from "../helpers/suite.ts";

/** A stand-in for berth.runtime.http_runner: behaviour chosen by the JSON body's `op` (or the asgi path). */
export class FakeRunner {
  readonly server: Server;
  port = 0;
  inFlight = 0;
  maxInFlight = 0;
  readonly seen: { method: string; url: string; headers: IncomingMessage["headers"]; body: string }[] = [];
  /** Requests whose caller went away before the answer. */
  aborted = 0;
  /** Requests with `{"op": "hold"}` wait here until release(). */
  private held: (() => void)[] = [];
  private readonly sockets = new Set<Socket>();

  constructor() {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.on("connection", (s) => {
      this.sockets.add(s);
      s.on("close", () => this.sockets.delete(s));
    });
    this.server.on("upgrade", (req, socket) => {
      this.seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: "" });
      socket.write("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n");
      socket.on("data", (c: Buffer) => socket.write(Buffer.concat([Buffer.from("echo:"), c])));
      socket.on("error", () => {});
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  /** Answers every held request. */
  release(): void {
    for (const r of this.held.splice(0)) r();
  }

  async stop(): Promise<void> {
    this.release();
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString();
    this.seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    res.on("close", () => {
      this.inFlight--;
      if (!res.writableFinished) this.aborted++;
    });
    if (req.url !== "/") {
      res.writeHead(200, { "content-type": "text/plain", "x-app": "asgi" });
      res.end(`${req.method} ${req.url} ${body}`);
      return;
    }
    const input = body ? (JSON.parse(body) as { op?: string; ms?: number }) : {};
    if (input.op === "fail") {
      const err = {
        error: { type: "ValueError", message: "boom", traceback: "Traceback ...\nValueError: boom" },
      };
      res.writeHead(500, { "content-type": "application/json", "x-berth-error": "1" });
      res.end(JSON.stringify(err));
      return;
    }
    if (input.op === "hang") return;
    if (input.op === "hold") await new Promise<void>((r) => this.held.push(r));
    if (input.op === "slow") await new Promise((r) => setTimeout(r, input.ms ?? 200));
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ got: input, task_id: req.headers["x-task-id"] }));
  }
}

export class FakeContainers implements EndpointContainers {
  private readonly byStub = new Map<string, EndpointContainer[]>();
  private readonly listeners = new Set<(stubId: string) => void>();

  containersOf(stubId: string): EndpointContainer[] {
    return this.byStub.get(stubId) ?? [];
  }

  onContainersChange(listener: (stubId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  set(stubId: string, containers: EndpointContainer[]): void {
    this.byStub.set(stubId, containers);
    for (const l of this.listeners) l(stubId);
  }
}

/** Dials the fake runner of a container; a container without one refuses (it died). */
export class FakeTunnels implements TunnelDialer {
  readonly ports = new Map<string, number>();
  readonly forgotten: string[] = [];
  private readonly agents = new Map<string, Agent>();

  private dial(containerId: string): Socket {
    const port = this.ports.get(containerId);
    // Port 1 on loopback refuses: the tunnel's CONNECT failing.
    return netConnect(port ?? 1, "127.0.0.1");
  }

  connect(_agentId: string, containerId: string): Promise<Duplex> {
    return new Promise((resolve, reject) => {
      const s = this.dial(containerId);
      s.once("connect", () => resolve(s));
      s.once("error", reject);
    });
  }

  httpAgent(_agentId: string, containerId: string): Agent {
    let a = this.agents.get(containerId);
    if (!a) {
      const agent = new Agent({ keepAlive: true });
      agent.createConnection = () => this.dial(containerId);
      a = agent;
      this.agents.set(containerId, a);
    }
    return a;
  }

  forget(containerId: string): void {
    this.forgotten.push(containerId);
    this.agents.get(containerId)?.destroy();
    this.agents.delete(containerId);
  }

  close(): void {
    for (const a of this.agents.values()) a.destroy();
  }
}

export class FakeDeployments implements DeploymentTargets {
  readonly byId = new Map<string, ResolvedDeployment>();
  readonly requests = new Map<string, number>();

  add(d: DeploymentInfo, stub: ResolvedDeployment["stub"]): ResolvedDeployment {
    const r = { deployment: d, stub };
    this.byId.set(d.id, r);
    return r;
  }

  async resolveByName(workspaceId: string, name: string, version?: number): Promise<ResolvedDeployment> {
    const all = [...this.byId.values()].filter(
      (r) => r.deployment.workspaceId === workspaceId && r.deployment.name === name,
    );
    const r =
      version === undefined
        ? (all
            .filter((x) => x.deployment.active)
            .sort((a, b) => b.deployment.version - a.deployment.version)[0] ?? all[0])
        : all.find((x) => x.deployment.version === version);
    if (!r) throw new BerthError("not_found", `deployment ${name} not found`);
    if (!r.deployment.active) throw new BerthError("deployment_stopped", `deployment ${name} is stopped`);
    return r;
  }

  async resolveById(id: string, o: { includeStopped?: boolean } = {}): Promise<ResolvedDeployment> {
    const r = this.byId.get(id);
    if (!r) throw new BerthError("not_found", `deployment ${id} not found`);
    // As the deployment service does: a stopped deployment is refused unless the caller refuses it itself.
    if (!r.deployment.active && !o.includeStopped)
      throw new BerthError("deployment_stopped", `deployment ${id} is stopped`);
    return r;
  }

  noteRequest(deploymentId: string): void {
    this.requests.set(deploymentId, (this.requests.get(deploymentId) ?? 0) + 1);
  }
}

export interface EndpointHarness {
  h: TaskHarness;
  app: FastifyInstance;
  base: string;
  endpoints: EndpointDispatcher;
  containers: FakeContainers;
  tunnels: FakeTunnels;
  deployments: FakeDeployments;
  token: string;
  otherToken: string;
  ws: Workspace;
  /** A deployment of `kind` with a stub of its own; no containers yet. */
  deploy(
    name: string,
    kind: string,
    o?: { config?: Partial<StubConfig>; extra?: Partial<StubExtra>; active?: boolean; version?: number },
  ): Promise<ResolvedDeployment>;
  /** Starts a fake runner as container `id` of the stub (and announces it). */
  addContainer(stubId: string, id: string): Promise<FakeRunner>;
}

/** A deployment as the model directory lists it (DeploymentWithStub), from what `deploy()` made. */
export function modelDeployment(r: ResolvedDeployment): DeploymentWithStub {
  const now = new Date().toISOString();
  return {
    ...r.deployment,
    stubId: r.stub.id,
    serve: false,
    lastRequestAt: null,
    startedAt: now,
    createdAt: now,
    updatedAt: now,
    config: r.stub.config,
    extra: r.stub.extra,
  };
}

let seq = 0;

export async function startEndpointHarness(
  suite: { after: (fn: () => unknown) => void },
  o: { endpointDomain?: string; directFoldMs?: number; log?: pino.Logger } = {},
): Promise<EndpointHarness> {
  const { defer, later } = teardownStack(suite);
  const h = await startTaskHarness(later, o);
  const containers = new FakeContainers();
  const tunnels = new FakeTunnels();
  defer(() => tunnels.close());
  const deployments = new FakeDeployments();
  const endpoints = new EndpointDispatcher({
    tokens: h.store.tokens,
    deployments,
    containers,
    tunnels,
    tasks: h.tasks,
    log: o.log ?? pino({ level: "silent" }),
  });
  defer(() => endpoints.close());
  const app = await buildTaskApp(h, o.endpointDomain ? { endpointDomain: o.endpointDomain } : {});
  await app.register(endpointRoutes(endpoints));
  if (o.endpointDomain) attachEndpointHostRewrite(app.server, o.endpointDomain);
  attachEndpointUpgrades(app.server, endpoints);
  await app.listen({ host: "127.0.0.1", port: 0 });
  defer(() => app.close());
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const token = (await h.store.tokens.create(h.ws.id)).secret;
  const otherToken = (await h.store.tokens.create(h.otherWs.id)).secret;
  const runners: FakeRunner[] = [];
  defer(async () => {
    for (const r of runners) await r.stop();
  });
  return {
    h,
    app,
    base,
    endpoints,
    containers,
    tunnels,
    deployments,
    token,
    otherToken,
    ws: h.ws,
    async deploy(name, kind, o = {}) {
      const version = o.version ?? 1;
      const { stub } = await h.tasks.upsertStub(h.ws.id, {
        name: `${name}/v${version}`,
        type: `${kind}/deployment`,
        config: stubConfig({ task_policy: { max_retries: 0, timeout: 180, expires: "180" }, ...o.config }),
        extra: stubExtra(o.extra),
      });
      return deployments.add(
        { id: `dep-${++seq}`, name, version, workspaceId: h.ws.id, kind, active: o.active ?? true },
        stub,
      );
    },
    async addContainer(stubId, id) {
      const r = await new FakeRunner().start();
      runners.push(r);
      tunnels.ports.set(id, r.port);
      containers.set(stubId, [
        ...containers.containersOf(stubId),
        { id, agentId: "agent-1", state: "running" },
      ]);
      return r;
    },
  };
}
