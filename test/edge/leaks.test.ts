// A proxied request that fails on its way to a container tells the client
// the catalog's words and an error id, never the socket's error or an agent
// tunnel's address; the log line with that id has them (MaskedError,
// coordinator/http/public-error.ts). Each path that used to pass them on:
// endpoints (a dropped request, no reachable container), pods (HTTP and
// websocket), /v1, exposed ports (HTTP and websocket, through a real agent
// tunnel that is down) and the tunnel's own error.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import { type AddressInfo, connect, createServer as createNetServer } from "node:net";
import { describe, test, type TestContext } from "node:test";
import Fastify from "fastify";
import { exposedPortRoute, PortProxy } from "../../coordinator/ports/proxy.ts";
import { dataPlaneServer } from "../../coordinator/edge/data-plane.ts";
import { publicError } from "../../coordinator/http/public-error.ts";
import { createInference } from "../../coordinator/inference/index.ts";
import { inferenceRoutes } from "../../coordinator/inference/routes.ts";
import type { DeploymentWithStub } from "../../coordinator/deployments/store.ts";
import type { TokenRepo } from "../../coordinator/store/workspaces.ts";
import { CATALOG, type ErrorCode } from "../../shared/errors.ts";
import { waitFor } from "../../shared/net.ts";
import { stubExtra } from "../tasks/fixtures.ts";
import { bearer } from "../helpers/auth.ts";
import { perSuite } from "../helpers/suite.ts";
import { modelDeployment, startEndpointHarness } from "../endpoints/harness.ts";
import { AGENT_ID, rig } from "../proxy/harness.ts";
import { type CapturedLog, captureLog } from "../helpers/log-capture.ts";

/**
 * The client's answer has the code's catalog summary and an error id, and
 * nothing `detail` matches; the log line with that id has what it matches.
 */
function assertMasked(
  c: CapturedLog,
  answer: unknown,
  detail: RegExp,
  code: ErrorCode = "bad_gateway",
): string {
  const text = JSON.stringify(answer);
  assert.doesNotMatch(text, detail, `the detail reached the client: ${text}`);
  assert.ok(text.includes(CATALOG[code].summary), `the catalog's words for ${code}: ${text}`);
  const id = /under id (err-[0-9a-f]+)/.exec(text)?.[1];
  assert.ok(id, `an error id in ${text}`);
  const line = c.lines().find((l) => l.errorId === id);
  assert.ok(line, `a log line with ${id}`);
  assert.match(JSON.stringify(line), detail, "the log line keeps the detail");
  return id;
}

/** A "container" that takes the connection and drops it as soon as the request arrives. */
async function dropper(suite: { after: (fn: () => unknown) => void }): Promise<number> {
  const server = createNetServer((s) => {
    s.on("error", () => {});
    s.once("data", () => s.destroy());
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  suite.after(() => server.close());
  return (server.address() as AddressInfo).port;
}

/** Sends an upgrade request; the answer's status and JSON body, read until the server closes. */
async function upgrade(
  base: string,
  path: string,
): Promise<{ status: number; body: unknown; answers: number }> {
  const u = new URL(base);
  const s = connect(Number(u.port), u.hostname);
  await once(s, "connect");
  s.write(`GET ${path} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`);
  let text = "";
  s.on("data", (c: Buffer) => {
    text += c.toString();
  });
  await once(s, "close");
  return {
    status: Number(text.slice(9, 12)),
    body: JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4)),
    answers: text.match(/HTTP\/1\.1 \d{3}/g)?.length ?? 0,
  };
}

// Port 1 on loopback refuses: what the endpoint harness's tunnel dials for a container with no server.
const REFUSED = /ECONNREFUSED|127\.0\.0\.1:1\b/;
const DROPPED = /socket hang up|ECONNRESET/;

describe("endpoints, pods and /v1 (the endpoint harness, a capturing log)", () => {
  const c = captureLog();
  const x = perSuite(async (suite) => {
    const e = await startEndpointHarness(suite, { log: c.log });
    const models: DeploymentWithStub[] = [];
    const gateway = createInference({
      endpoints: e.endpoints,
      activeDeployments: () => models,
      repo: e.h.store.inference,
      workspaces: e.h.store.workspaces,
      deployments: e.h.store.deployments,
      // Read from the store at each request: the tests change limits between calls.
      limits: { get: (ws) => e.h.store.limits.get(ws), report: () => {} },
      log: c.log,
    }).service;
    const v1 = Fastify();
    await v1.register(inferenceRoutes(gateway));
    await v1.listen({ host: "127.0.0.1", port: 0 });
    suite.after(() => v1.close());
    const dropPort = await dropper(suite);
    return { e, models, v1: `http://127.0.0.1:${(v1.server.address() as AddressInfo).port}`, dropPort };
  });
  const post = (url: string, body: unknown) =>
    fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer(x.e.token) },
      body: JSON.stringify(body),
    });

  test("an endpoint whose container drops the request: 502, masked; the task's error is the client's", async () => {
    const d = await x.e.deploy("dropped", "endpoint");
    x.e.tunnels.ports.set("ctr-drop", x.dropPort);
    x.e.containers.set(d.stub.id, [{ id: "ctr-drop", agentId: "agent-1", state: "running" }]);
    const res = await post(`${x.e.base}/endpoint/dropped`, { x: 1 });
    assert.equal(res.status, 502);
    const body = (await res.json()) as { error: { code: string; message: string }; task_id: string };
    assert.equal(body.error.code, "bad_gateway");
    assert.equal(res.headers.get("x-task-id"), body.task_id);
    assertMasked(c, body, DROPPED);
    const task = async () => x.e.h.tasks.getTask(x.e.ws.id, body.task_id);
    await waitFor(async () => (await task()).status === "FAILED", { what: "the task to fail" });
    assert.equal(
      (await task()).error?.message,
      body.error.message,
      "the task record says what the client was told",
    );
  });

  test("an endpoint none of whose containers can be reached: 502 after the retries, masked", async () => {
    const d = await x.e.deploy("unreachable", "endpoint");
    x.e.containers.set(
      d.stub.id,
      ["ctr-u1", "ctr-u2", "ctr-u3"].map((id) => ({ id, agentId: "agent-1", state: "running" })),
    );
    const res = await post(`${x.e.base}/endpoint/unreachable`, { x: 1 });
    assert.equal(res.status, 502);
    assertMasked(c, await res.json(), REFUSED);
  });

  test("a pod whose server is gone: HTTP and websocket both 502, naming the pod, masked", async () => {
    const d = await x.e.deploy("web-gone", "pod", {
      config: { authorized: false },
      extra: stubExtra({ entrypoint: ["python3", "-m", "http.server", "8080"], ports: [8080] }),
    });
    x.e.containers.set(d.stub.id, [{ id: "ctr-pod-gone", agentId: "agent-1", state: "running" }]);
    const res = await fetch(`${x.e.base}/endpoint/id/${d.deployment.id}/page`);
    assert.equal(res.status, 502);
    const body = (await res.json()) as { error: { message: string } };
    assert.match(body.error.message, /^pod 'web-gone(\/v1)?': /);
    assertMasked(c, body, REFUSED);

    const ws = await upgrade(x.e.base, `/endpoint/id/${d.deployment.id}/live`);
    assert.equal(ws.status, 502);
    assert.equal(ws.answers, 1);
    assertMasked(c, ws.body, REFUSED);
  });

  test("/v1 on a model server that drops the request: 502 in OpenAI's shape, masked", async () => {
    const r = await x.e.deploy("dropping-model", "asgi", { extra: { served_models: ["dropper"] } });
    x.models.push(modelDeployment(r));
    x.e.tunnels.ports.set("ctr-model-drop", x.dropPort);
    x.e.containers.set(r.stub.id, [{ id: "ctr-model-drop", agentId: "agent-1", state: "running" }]);
    const res = await post(`${x.v1}/v1/chat/completions`, { model: "dropper", messages: [] });
    assert.equal(res.status, 502);
    const body = (await res.json()) as { error: { code: string; type: string } };
    assert.equal(body.error.code, "bad_gateway");
    assert.equal(body.error.type, "service_unavailable_error");
    assertMasked(c, body, DROPPED);
  });
});

describe("exposed ports and the agent tunnel (a real tunnel client; the agent's tunnel is down)", () => {
  const TUNNEL_AT = /127\.0\.0\.1:1\b/;

  async function setup(t: TestContext) {
    const c = captureLog();
    const r = await rig(t);
    const heartbeat = r.fleet.get(AGENT_ID)?.heartbeat;
    assert.ok(heartbeat);
    // An agent whose heartbeat names a tunnel address nothing listens on.
    r.fleet.observe({ ...heartbeat, agentId: "agent-away", proxyAddress: "127.0.0.1:1" }, Date.now());
    const ports = new PortProxy({
      targets: { find: async () => ({ agentId: "agent-away", workspaceId: "ws", requiresAuth: false }) },
      tunnels: r.tunnels,
      // Public ports (requiresAuth false): no token is looked up.
      tokens: {} as TokenRepo,
      log: c.log,
    });
    const server = dataPlaneServer(createServer, [exposedPortRoute(ports)], c.log)((_req, res) => res.end());
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    t.after(() => {
      server.closeAllConnections();
      server.close();
    });
    return { c, r, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
  }

  test("HTTP and websocket to the port: 502 naming the port, the tunnel's address only in the log", async (t) => {
    const { c, base } = await setup(t);
    const res = await fetch(`${base}/port/ctr-far/8080/x`);
    assert.equal(res.status, 502);
    const body = (await res.json()) as { error: { message: string } };
    assert.match(body.error.message, /^port 8080 of container ctr-far: /);
    assertMasked(c, body, TUNNEL_AT);

    const ws = await upgrade(base, "/port/ctr-far/8080/live");
    assert.equal(ws.status, 502);
    assert.equal(ws.answers, 1);
    assertMasked(c, ws.body, TUNNEL_AT);
  });

  test("the tunnel's own error, answered as it is: unavailable, masked", async (t) => {
    const { c, r } = await setup(t);
    const err = await r.tunnels.connect("agent-away", "ctr-far", 8080).then(
      () => assert.fail("the tunnel is down"),
      (e: unknown) => e,
    );
    assert.match(String((err as Error).message), TUNNEL_AT, "the error itself keeps the detail for the log");
    const pe = publicError(err, { log: c.log });
    assert.equal(pe.status, 503);
    assertMasked(c, pe.body, TUNNEL_AT, "unavailable");
  });
});
