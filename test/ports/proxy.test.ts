// The exposed-port proxy over a real agent tunnel (TLS, CONNECT) to real
// local HTTP and upgrade servers standing in for container ports, served by
// the coordinator's HTTP app (before Fastify) over a real SQLite store.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type IncomingHttpHeaders } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { test, type TestContext } from "node:test";
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { portsHttpRoutes } from "../../coordinator/ports/index.ts";
import { bareHttpApp } from "../helpers/bare-app.ts";
import { attachPortUpgrades, PortProxy, type PortTarget } from "../../coordinator/ports/proxy.ts";
import { Store } from "../../coordinator/records.ts";
import { tempDir } from "../helpers/env.ts";
import { storeJoinService } from "../helpers/join.ts";
import { AGENT_ID, listen, readUntil, rig } from "../proxy/harness.ts";
import { bearer } from "../helpers/auth.ts";

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A container port: echoes what it got as JSON; upgrades answer 101 and shout back. */
async function upstream(t: TestContext): Promise<{ port: number; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const s = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      };
      seen.push(s);
      res.writeHead(201, { "content-type": "application/json", "x-app": "yes" });
      res.end(JSON.stringify({ method: s.method, url: s.url, body: s.body }));
    });
  });
  server.on("upgrade", (req, socket, head: Buffer) => {
    seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: "" });
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    if (head.length > 0) socket.write(head.toString().toUpperCase());
    socket.on("data", (c: Buffer) => socket.write(c.toString().toUpperCase()));
    socket.on("error", () => {});
  });
  return { port: await listen(t, server), seen };
}

interface Rig {
  base: string;
  port: number;
  app: FastifyInstance;
  seen: Seen[];
  targets: Map<string, PortTarget>;
  activity: string[];
  token: string;
  otherToken: string;
  wsId: string;
}

async function setup(t: TestContext): Promise<Rig> {
  const r = await rig(t);
  const up = await upstream(t);
  r.containers.set("ctr-web1", { state: "running", ipv4: "127.0.0.1", exposedPorts: [up.port] });
  const store = await Store.open(`sqlite:${tempDir(t)}/b.db`);
  t.after(() => store.close());
  const ws = await store.workspaces.create("main");
  const other = await store.workspaces.create("elsewhere");
  const token = (await store.tokens.create(ws.id)).secret;
  const otherToken = (await store.tokens.create(other.id)).secret;
  const targets = new Map<string, PortTarget>();
  const activity: string[] = [];
  const ports = new PortProxy({
    targets: { find: async (id, port) => targets.get(`${id}:${port}`) },
    tunnels: r.tunnels,
    tokens: store.tokens,
    log: pino({ level: "silent" }),
    endpointDomain: "apps.test",
    onActivity: (id) => activity.push(id),
  });
  const join = await storeJoinService(store);
  const app = await bareHttpApp({
    store,
    fleet: new FleetView(),
    join,
    areas: [portsHttpRoutes(ports)],
    endpointDomain: "apps.test",
  });
  attachPortUpgrades(app.server, ports);
  await app.listen({ host: "127.0.0.1", port: 0 });
  t.after(() => app.close());
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return { base, port: up.port, app, seen: up.seen, targets, activity, token, otherToken, wsId: ws.id };
}

const errorOf = async (res: Response) =>
  ((await res.json()) as { error: { code: string; message: string } }).error;

test("HTTP to an exposed port: the prefix is stripped, the body streams, headers come back, activity is noted", async (t) => {
  const x = await setup(t);
  x.targets.set(`ctr-web1:${x.port}`, { agentId: AGENT_ID, workspaceId: x.wsId, requiresAuth: false });
  const res = await fetch(`${x.base}/port/ctr-web1/${x.port}/a/b?q=1`, {
    method: "POST",
    body: "hello",
    headers: { authorization: "Bearer app-own-token" },
  });
  assert.equal(res.status, 201);
  assert.equal(res.headers.get("x-app"), "yes");
  assert.deepEqual(await res.json(), { method: "POST", url: "/a/b?q=1", body: "hello" });
  const seen = x.seen.at(-1) as Seen;
  assert.equal(seen.headers["x-forwarded-prefix"], `/port/ctr-web1/${x.port}`);
  assert.equal(
    seen.headers.authorization,
    "Bearer app-own-token",
    "a public port's caller keeps its own header",
  );
  assert.deepEqual(x.activity, ["ctr-web1"]);

  const root = await fetch(`${x.base}/port/ctr-web1/${x.port}`);
  assert.equal(root.status, 201);
  assert.equal(((await root.json()) as { url: string }).url, "/");
  // Other routes still reach Fastify.
  assert.equal((await fetch(`${x.base}/healthz`)).status, 200);
});

test("unknown container or port: 404 JSON naming them; a bad port number: 400", async (t) => {
  const x = await setup(t);
  x.targets.set(`ctr-web1:${x.port}`, { agentId: AGENT_ID, workspaceId: x.wsId, requiresAuth: false });
  const none = await fetch(`${x.base}/port/ctr-nope/${x.port}/`);
  assert.equal(none.status, 404);
  const e = await errorOf(none);
  assert.equal(e.code, "not_found");
  assert.match(e.message, /ctr-nope/);
  assert.equal(
    (await fetch(`${x.base}/port/ctr-web1/9/`)).status,
    404,
    "a port the container does not expose",
  );
  const bad = await fetch(`${x.base}/port/ctr-web1/http/`);
  assert.equal(bad.status, 400);
  assert.match((await errorOf(bad)).message, /port "http"/);
  assert.equal((await fetch(`${x.base}/port/ctr-web1`)).status, 404);
  assert.deepEqual(x.seen, [], "nothing reached the container");
});

test("a port that needs auth: no token 401, another workspace's 404, the workspace's passes (and is not forwarded)", async (t) => {
  const x = await setup(t);
  x.targets.set(`ctr-web1:${x.port}`, { agentId: AGENT_ID, workspaceId: x.wsId, requiresAuth: true });
  const url = `${x.base}/port/ctr-web1/${x.port}/`;
  const anon = await fetch(url);
  assert.equal(anon.status, 401);
  assert.equal((await errorOf(anon)).code, "unauthenticated");
  assert.equal((await fetch(url, { headers: { authorization: "Bearer bt_nope" } })).status, 401);
  assert.equal((await fetch(url, { headers: bearer(x.otherToken) })).status, 404);
  assert.equal(x.seen.length, 0);
  const ok = await fetch(url, { headers: bearer(x.token) });
  assert.equal(ok.status, 201);
  await ok.arrayBuffer();
  assert.equal(x.seen.at(-1)?.headers.authorization, undefined);
});

test("a port whose server is gone: 502 bad_gateway naming the container", async (t) => {
  const x = await setup(t);
  // Exposed as far as the coordinator knows, but the agent's container does not listen there.
  x.targets.set("ctr-web1:1", { agentId: AGENT_ID, workspaceId: x.wsId, requiresAuth: false });
  const res = await fetch(`${x.base}/port/ctr-web1/1/`);
  assert.equal(res.status, 502);
  const e = await errorOf(res);
  assert.equal(e.code, "bad_gateway");
  assert.match(e.message, /ctr-web1/);
});

/** Sends a raw upgrade request; returns the socket and the answer head. */
async function upgrade(base: string, path: string, host?: string, extra = "") {
  const u = new URL(base);
  const s = connect(Number(u.port), u.hostname);
  await once(s, "connect");
  s.write(
    `GET ${path} HTTP/1.1\r\nHost: ${host ?? u.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n${extra}\r\n`,
  );
  const head = await readUntil(s, "\r\n\r\n");
  return { s, head };
}

test("websockets to an exposed port are piped both ways; unknown ones get 404 before any upgrade", async (t) => {
  const x = await setup(t);
  x.targets.set(`ctr-web1:${x.port}`, { agentId: AGENT_ID, workspaceId: x.wsId, requiresAuth: false });
  const { s, head } = await upgrade(x.base, `/port/ctr-web1/${x.port}/ws?room=1`);
  t.after(() => s.destroy());
  assert.match(head, /^HTTP\/1\.1 101 /);
  s.write("ping");
  assert.match(await readUntil(s, "PING"), /PING$/);
  assert.equal(x.seen.at(-1)?.url, "/ws?room=1");
  assert.deepEqual(x.activity, ["ctr-web1"]);

  const miss = await upgrade(x.base, `/port/ctr-gone/${x.port}/`);
  t.after(() => miss.s.destroy());
  assert.match(miss.head, /^HTTP\/1\.1 404 /);
  const nowhere = await upgrade(x.base, "/elsewhere");
  t.after(() => nowhere.s.destroy());
  assert.match(nowhere.head, /^HTTP\/1\.1 404 /, "an upgrade no route claims is refused");
});

test("host names {container_id}-{port}.{endpointDomain} serve the port without a prefix, websockets too", async (t) => {
  const x = await setup(t);
  x.targets.set(`ctr-web1:${x.port}`, { agentId: AGENT_ID, workspaceId: x.wsId, requiresAuth: false });
  const u = new URL(x.base);
  const host = `ctr-web1-${x.port}.apps.test:${u.port}`;
  const got = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname, () =>
      s.write(`GET /x/y HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`),
    );
    let text = "";
    s.on("data", (c: Buffer) => {
      text += c.toString();
    });
    s.on("end", () =>
      resolve({ status: Number(text.slice(9, 12)), body: text.slice(text.indexOf("\r\n\r\n") + 4) }),
    );
    s.on("error", reject);
  });
  assert.equal(got.status, 201);
  assert.match(got.body, /"url":"\/x\/y"/);
  assert.equal(x.seen.at(-1)?.headers["x-forwarded-prefix"], "");
  const { s, head } = await upgrade(x.base, "/live", host);
  t.after(() => s.destroy());
  assert.match(head, /^HTTP\/1\.1 101 /);
  s.write("abc");
  assert.match(await readUntil(s, "ABC"), /ABC$/);
});
