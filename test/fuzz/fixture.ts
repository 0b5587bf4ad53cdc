// The route fuzzer's coordinator: the workspace-scoping fixture (the whole
// HTTP app over SQLite, nats-server and the real services, the fake agent
// for sandboxes) plus the services it leaves out — image builds, volumes,
// outputs, Prometheus, the endpoint dispatcher, the inference gateway, the
// agent revoker (over the fixture's fleet) and a built dashboard — and objects of BOTH
// workspaces. Every object of A carries "canary" and every object of B
// "bravo" in its name or content, so an answer to one workspace's token
// that holds the other's marker is a leak.

import { randomBytes, createHash } from "node:crypto";
import { createServer, Agent, type Server } from "node:http";
import { connect as netConnect, type AddressInfo, type Socket } from "node:net";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, type Duplex } from "node:stream";
import pino from "pino";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { EndpointDispatcher } from "../../coordinator/endpoints/dispatch.ts";
import { RevokedAgents } from "../../coordinator/fleet/agent-credentials.ts";
import { AgentRevoker } from "../../coordinator/fleet/revoke.ts";
import { HandPulls, ImageBuilds } from "../../coordinator/images/index.ts";
import { createInference, inferenceHttpRoutes } from "../../coordinator/inference/index.ts";
import { Limits } from "../../coordinator/limits/index.ts";
import { CoordinatorMetrics, prometheusRoutes } from "../../coordinator/metrics/index.ts";
import { OutputStore } from "../../coordinator/outputs/output-store.ts";
import { outputsHttpRoutes } from "../../coordinator/outputs/index.ts";
import { endpointsHttpRoutes } from "../../coordinator/endpoints/index.ts";
import { imagesHttpRoutes } from "../../coordinator/images/index.ts";
import { volumesHttpRoutes } from "../../coordinator/volumes/index.ts";
import { ssoHttpRoutes } from "../../coordinator/sso/index.ts";
import { Planner } from "../../coordinator/scheduler/planner.ts";
import { VolumeFiles } from "../../coordinator/volumes/volume-files.ts";
import { deployInput } from "../deployments/helpers.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { BOT_NAME } from "../bots/helpers.ts";
import { addContainer } from "../http/harness.ts";
import { type ScopingFixture, startScopingFixture } from "../http/scoping-fixtures.ts";

/** What one workspace's objects are called, by the path parameter names the routes use. */
export type SideValues = Record<string, string>;

export interface FuzzFixture {
  f: ScopingFixture;
  /** The endpoint dispatcher the app serves /endpoint/... with. */
  endpoints: EndpointDispatcher;
  tokens: { a: string; b: string; admin: string };
  /** What the admin token's requests on operator-only routes name: A's objects and a joined agent of its own to revoke. */
  adminValues: SideValues;
  /** Path and query parameter values naming each workspace's own objects. */
  values: { a: SideValues; b: SideValues };
  /** The marker in every object of each workspace. */
  markers: { a: string; b: string };
}

/** The built dashboard's one script (GET /assets/{file}): public, so it holds neither workspace's marker. */
export const DASHBOARD_ASSET = "app-FUZZ0001.js";

/** An image builder that builds every spec in one step, as an agent's events would say. */
class OneStepBuilder implements ImageBuildApi {
  async *buildImage(req: BuildImageRequest): AsyncGenerator<BuildEvent> {
    const imageId = `img-${createHash("sha256").update(JSON.stringify(req.steps)).digest("hex").slice(0, 24)}`;
    yield { type: "base", imageId, ref: req.baseImage ?? "default", digest: "sha256:base" };
    yield {
      type: "done",
      imageId,
      ref: `localhost/fuzz:${imageId}`,
      digest: "sha256:final",
      cachedSteps: 0,
      builtSteps: req.steps.length,
    };
  }
}

/** Stands in for the runner's HTTP server in endpoint containers: always 200, echoing nothing of the request. */
async function runnerStandIn(): Promise<{ server: Server; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"answer":"runner stand-in"}');
    });
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  server.on("upgrade", (_req, socket) => socket.destroy());
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { server, sockets };
}

export async function startFuzzFixture(suite: { after: (fn: () => unknown) => void }): Promise<FuzzFixture> {
  const dir = await mkdtemp(join(tmpdir(), "berth-fuzz-"));
  suite.after(() => rm(dir, { recursive: true, force: true }));
  const runner = await runnerStandIn();
  suite.after(
    () =>
      new Promise((r) => {
        for (const s of runner.sockets) s.destroy();
        runner.server.close(r);
      }),
  );
  const runnerPort = (runner.server.address() as AddressInfo).port;
  const volumes = new VolumeFiles(join(dir, "volumes"));
  const outputs = new OutputStore({
    root: join(dir, "outputs"),
    signingKey: randomBytes(32),
    publicUrl: "https://berth.example/",
  });
  // A built dashboard (what `npm run build` writes), so GET / answers the page rather than 503 "not built".
  const dashboard = join(dir, "dashboard");
  await mkdir(join(dashboard, "assets"), { recursive: true });
  await writeFile(
    join(dashboard, "index.html"),
    `<!doctype html><script src="/assets/${DASHBOARD_ASSET}"></script>`,
  );
  await writeFile(join(dashboard, "assets", DASHBOARD_ASSET), "console.log('dashboard');\n");
  let endpoints!: EndpointDispatcher;
  let images!: ImageBuilds;
  const f = await startScopingFixture(suite, {
    extra: async (h, containers, later, deployments, agent, fleet) => {
      const log = pino({ level: "silent" });
      const builder = new OneStepBuilder();
      endpoints = new EndpointDispatcher({
        tokens: h.store.tokens,
        deployments,
        containers: {
          containersOf: (stubId) => containers.info((c) => c.stubId === stubId),
          onContainersChange: (fn) => containers.onChange((stubId) => fn(stubId)),
        },
        tunnels: {
          connect: (): Promise<Duplex> =>
            new Promise((resolve, reject) => {
              const s = netConnect(runnerPort, "127.0.0.1");
              s.once("connect", () => resolve(s));
              s.once("error", reject);
            }),
          httpAgent: () => {
            const a = new Agent({ keepAlive: false });
            a.createConnection = () => netConnect(runnerPort, "127.0.0.1");
            return a;
          },
          forget: () => {},
        },
        tasks: h.tasks,
        log,
        podStartWaitMs: 0,
      });
      later.after(() => endpoints.close());
      const metrics = new CoordinatorMetrics({
        taskCounts: () => h.store.metrics.taskStatusCounts(),
        containers: () => containers.info(),
        stubType: async (id) => (await h.store.stubs.get(id))?.type,
        agents: () => fleet.list().map((a) => ({ state: a.state, pool: "default" })),
        processMetrics: false,
      });
      images = new ImageBuilds({
        repo: h.store.builtImages,
        planner: new Planner({ fleet }),
        agents: { client: () => builder },
        placementWaitMs: 0,
      });
      const revoker = new AgentRevoker({
        agents: h.store.agents,
        revoked: await new RevokedAgents(h.store.kv).load(),
        fleet,
        clients: {},
        nc: h.nc,
        log,
      });
      const gateway = createInference({
        endpoints,
        activeDeployments: () => deployments.activeDeployments(),
        repo: h.store.inference,
        workspaces: h.store.workspaces,
        deployments: h.store.deployments,
        limits: new Limits(h.store.limits),
        registry: metrics.registry,
        log,
      }).service;
      return {
        fleet: { view: fleet, revoker },
        dashboard: { dir: dashboard },
        outputs,
        routes: [
          // The Prometheus request counters, on every route (the metrics routes are the harness's own).
          { hooks: [prometheusRoutes({ metrics })] },
          inferenceHttpRoutes(gateway, {
            repo: h.store.inference,
            workspaces: h.store.workspaces,
            deployments: h.store.deployments,
          }),
          imagesHttpRoutes(
            images,
            new HandPulls({
              repo: h.store.builtImages,
              ready: () => fleet.ready(),
              pullOn: (_agentId, ref) => agent.pullImage(ref),
            }),
          ),
          volumesHttpRoutes({ files: volumes }),
          outputsHttpRoutes(outputs),
          endpointsHttpRoutes(endpoints),
          // Sessions and the login routes (single sign-on not configured: the exchange says so).
          ssoHttpRoutes({ tokens: h.store.tokens }),
        ],
      };
    },
  });
  const { x } = f;
  const { h } = x;
  const a = x.a;
  const b = x.b;

  // B's objects, one of each kind A was given.
  const bDeployment = await x.deployments.deploy(b.id, deployInput("bravo-web", "endpoint"));
  const { stub: bStub } = await h.tasks.upsertStub(b.id, {
    name: "bravo-fn",
    type: "function",
    config: stubConfig(),
    extra: stubExtra(),
  });
  const [bTask] = await h.tasks.submit(b.id, bStub.id, [new TextEncoder().encode("bravo")]);
  const bBytes = new TextEncoder().encode("bravo code");
  const bSha = createHash("sha256").update(bBytes).digest("hex");
  await h.objects.putBytes(b.id, bSha, bBytes);
  addContainer(x.containers, { id: "ctr-bravo", stubId: bStub.id, workspaceId: b.id, since: Date.now() });
  // The endpoint deployments get a running container each, so a valid call is answered by the stand-in.
  addContainer(x.containers, {
    id: "ctr-canary-web",
    stubId: x.seeded.deployment.stubId,
    workspaceId: a.id,
    since: Date.now(),
  });
  addContainer(x.containers, {
    id: "ctr-bravo-web",
    stubId: bDeployment.stubId,
    workspaceId: b.id,
    since: Date.now(),
  });
  const bSandboxStub = await h.store.stubs.upsert(b.id, {
    name: "bravo-sandbox",
    type: "sandbox",
    config: stubConfig({ handler: "", authorized: true }),
    extra: stubExtra({ ports: [8000] }),
    objectId: null,
  });
  const bSandbox = await f.sandboxes.create(b.id, bSandboxStub.stub.id);
  await f.sandboxes.exec(b.id, bSandbox.sandboxId, { args: ["bravo-proc"] });

  const imageIds: Record<string, string> = {};
  for (const [ws, mark] of [
    [a.id, "canary"],
    [b.id, "bravo"],
  ] as const) {
    await volumes.create(ws, `${mark}-vol`);
    await volumes.write(ws, `${mark}-vol`, `/${mark}.txt`, Readable.from([Buffer.from(`${mark} file`)]));
    // A built image each (its own step, so its own id): DELETE /api/v1/image/{ws}/{imageId} names a real one.
    for await (const u of images.build(ws, { commands: [`echo ${mark}`] }))
      if (u.type === "image") imageIds[mark] = u.image.imageId;
    if (!imageIds[mark]) throw new Error(`the ${mark} image build ended without an image`);
  }
  const spare = async (ws: string) => (await h.store.tokens.create(ws, { name: "spare" })).record.id;
  const admin = await h.store.tokens.create((await h.store.workspaces.create("fuzz-ops")).id, {
    name: "ops",
    admin: true,
  });
  const side = (o: {
    ws: string;
    deploymentId: string;
    deploymentName: string;
    stubId: string;
    taskId: string;
    sha: string;
    sandboxId: string;
    mark: string;
    tokenId: string;
    containerId: string;
  }): SideValues => ({
    ws: o.ws,
    id: o.deploymentId,
    deployment_id: o.deploymentId,
    taskId: o.taskId,
    task_id: o.taskId,
    appId: `app-${o.deploymentName}`,
    stubId: o.stubId,
    stub_id: o.stubId,
    sha256: o.sha,
    tokenId: o.tokenId,
    container_id: o.containerId,
    stackId: `stack-${o.mark}`,
    agentId: "agent-1",
    deploymentName: o.deploymentName,
    version: "v1",
    sandboxId: o.sandboxId,
    pid: "1",
    volume: `${o.mark}-vol`,
    imageId: imageIds[o.mark] as string,
    deployment: o.deploymentName,
    file: DASHBOARD_ASSET,
  });
  const values = {
    a: {
      ...side({
        ws: a.externalId,
        deploymentId: x.seeded.deployment.id,
        deploymentName: x.seeded.deployment.name,
        stubId: x.seeded.stubId,
        taskId: x.seeded.taskId,
        sha: x.seeded.objectSha256,
        sandboxId: f.sandboxId,
        mark: "canary",
        tokenId: await spare(a.id),
        containerId: x.seeded.containerId,
      }),
      webhookId: x.seeded.webhookId,
      name: x.seeded.secretName,
      botName: BOT_NAME,
      session_id: f.botSessionId,
    },
    b: {
      ...side({
        ws: b.externalId,
        deploymentId: bDeployment.id,
        deploymentName: bDeployment.name,
        stubId: bStub.id,
        taskId: bTask as string,
        sha: bSha,
        sandboxId: bSandbox.sandboxId,
        mark: "bravo",
        tokenId: await spare(b.id),
        containerId: "ctr-bravo",
      }),
      name: "BRAVO_SECRET",
      botName: BOT_NAME,
      session_id: (await f.bots.create(b.id, BOT_NAME)).id,
    },
  };
  // A joined host only the admin token's requests name: revoking it cuts no agent the other services place on.
  const revokable = await h.store.agents.upsertJoin({
    id: "agent-fuzzrevoke",
    hostname: "fuzz-host",
    version: "t",
    grpcAddress: "127.0.0.1:1",
  });
  // And a join token of its own: `{id}` names it on the join-token routes (the only operator-only routes with an id).
  const joinToken = await h.store.joinTokens.create("fuzz");
  const adminValues = { ...values.a, agentId: revokable.id, id: joinToken.record.id };
  return {
    f,
    endpoints,
    adminValues,
    tokens: { a: x.tokenA, b: x.tokenB, admin: admin.secret },
    values,
    markers: { a: "canary", b: "bravo" },
  };
}
