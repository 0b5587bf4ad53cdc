// The public error edge (coordinator/http/public-error.ts; docs/design-notes.md,
// "One public error edge"): every code a client can see is in the catalog,
// and an internal error's text reaches no client on any path, while the log
// line carries the id the client got.

import assert from "node:assert/strict";
import { once } from "node:events";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join, relative, resolve } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from "fastify";
import { HttpRefusal, publicError, statusOf } from "../../coordinator/http/public-error.ts";
import type { EndpointDispatcher } from "../../coordinator/endpoints/dispatch.ts";
import { attachEndpointUpgrades } from "../../coordinator/endpoints/websocket.ts";
import { installErrorHandlers } from "../../coordinator/http/errors.ts";
import { installGatewayErrors } from "../../coordinator/http/gateway.ts";
import { serveEndpointRequest } from "../../coordinator/endpoints/routes.ts";
import { attachShellUpgrades } from "../../coordinator/edge/shell.ts";
import { attachPortUpgrades, PortProxy } from "../../coordinator/ports/proxy.ts";
import type { TokenRepo } from "../../coordinator/store/workspaces.ts";
import { BerthError, CATALOG } from "../../shared/errors.ts";
import { type CapturedLog, captureLog } from "../helpers/log-capture.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const SECRET = "s3cret-db-password-in-a-stack";

// ---- the catalog scan -------------------------------------------------------

/** Where a coordinator source writes an error code for a client: constructors and `code: "..."` literals. */
const CODE_SITES = [
  /new\s+(?:BerthError|HttpRefusal|MaskedError)\(\s*"([a-z_]+)"/g,
  /\bcode:\s*"([a-z_]+)"/g,
];

/** Every code written in `src`. */
export function codesIn(src: string): string[] {
  const out: string[] = [];
  for (const re of CODE_SITES) for (const m of src.matchAll(re)) if (m[1]) out.push(m[1]);
  return out;
}

/** `file: code` for each code written in `files` that CATALOG lacks. */
export function uncataloged(files: { path: string; src: string }[]): string[] {
  return files.flatMap((f) =>
    codesIn(f.src)
      .filter((c) => !Object.hasOwn(CATALOG, c))
      .map((c) => `${f.path}: ${c}`),
  );
}

function sources(dir: string): { path: string; src: string }[] {
  const out: { path: string; src: string }[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (name.endsWith(".ts")) out.push({ path: relative(ROOT, p), src: readFileSync(p, "utf8") });
  }
  return out;
}

describe("every error code a client sees is in the catalog", () => {
  const files = sources(join(ROOT, "coordinator"));

  test("the scan finds the codes of the raw paths and the routes", () => {
    const all = new Set(files.flatMap((f) => codesIn(f.src)));
    for (const c of [
      "not_found",
      "bad_gateway",
      "task_timeout",
      "task_cancelled",
      "unauthenticated",
      "route_not_found",
    ])
      assert.ok(all.has(c), `the scan should find ${c}`);
  });

  test("the coordinator writes no code outside CATALOG", () => {
    assert.deepEqual(uncataloged(files), []);
  });

  test("the scan fails on a made-up code", () => {
    const bad = [
      { path: "x.ts", src: 'throw new BerthError("made_up_code", "no")' },
      { path: "y.ts", src: 'new MaskedError(\n "teapot", "short and stout")' },
      { path: "z.ts", src: 'answer({ error: { code: "gateway_melted", message } })' },
    ];
    assert.deepEqual(uncataloged(bad), ["x.ts: made_up_code", "y.ts: teapot", "z.ts: gateway_melted"]);
  });

  test("the statuses the raw paths always answered are the catalog's", () => {
    assert.equal(statusOf(new BerthError("bad_gateway", "x")), 502);
    assert.equal(statusOf(new BerthError("task_timeout", "x")), 504);
    assert.equal(statusOf(new BerthError("task_expired", "x")), 503);
    assert.equal(statusOf(new BerthError("task_cancelled", "x")), 409);
    assert.equal(statusOf(new BerthError("limit_exceeded", "x")), 429);
    assert.equal(statusOf(new HttpRefusal("invalid_request", "x", { status: 426 })), 426);
  });
});

// ---- the edge itself ---------------------------------------------------------

/** The id in a masked message, checked against the log: one error line with that id and the real error. */
function assertMasked(body: unknown, c: CapturedLog, where: string): void {
  const text = JSON.stringify(body);
  assert.ok(!text.includes(SECRET), `${where}: the internal error's text reached the client: ${text}`);
  const m = /under id (err-[0-9a-f]+)/.exec(text);
  assert.ok(m, `${where}: no error id in ${text}`);
  const line = c.lines().find((l) => l.errorId === m[1]);
  assert.ok(line, `${where}: no log line with ${m[1]}`);
  assert.ok(JSON.stringify(line).includes(SECRET), `${where}: the log line lacks the real error`);
}

describe("publicError", () => {
  test("an internal BerthError and a TypeError are masked, with the id in the log", () => {
    for (const err of [new BerthError("internal", SECRET), new TypeError(SECRET)]) {
      const c = captureLog();
      const pe = publicError(err, { log: c.log });
      assert.equal(pe.status, 500);
      assert.equal((pe.body as { error: { code: string } }).error.code, "internal");
      assertMasked(pe.body, c, err.constructor.name);
    }
  });

  test("a dependency away (NATS, PostgreSQL, a refused socket) is 503 unavailable, named without its words; the log has them", () => {
    const nats = Object.assign(new Error(`TIMEOUT nats://${SECRET}:4222`), {
      name: "NatsError",
      code: "TIMEOUT",
    });
    const noResponders = Object.assign(new Error(SECRET), { name: "NatsError", code: "503" });
    const pgShutdown = Object.assign(new Error(`terminating connection ${SECRET}`), { code: "57P01" });
    const pgGone = new Error(`Connection terminated unexpectedly ${SECRET}`);
    const refused = Object.assign(new Error(`connect ECONNREFUSED ${SECRET}`), { code: "ECONNREFUSED" });
    const cases: [Error, RegExp][] = [
      [nats, /message bus \(NATS\)/],
      [noResponders, /message bus \(NATS\)/],
      [pgShutdown, /store \(the database\)/],
      [pgGone, /store \(the database\)/],
      [refused, /not reachable/],
    ];
    for (const [err, named] of cases) {
      const c = captureLog();
      const pe = publicError(err, { log: c.log });
      const body = pe.body as { error: { code: string; message: string } };
      assert.equal(pe.status, 503, err.message);
      assert.equal(body.error.code, "unavailable");
      assert.match(body.error.message, named);
      assert.ok(
        !JSON.stringify(pe.body).includes(SECRET),
        `the driver's words reached the client: ${body.error.message}`,
      );
      assert.ok(
        c.lines().some((l) => JSON.stringify(l).includes(SECRET)),
        "the log line has the driver's error",
      );
    }
    // A NatsError that is not about availability (a permissions violation) stays internal.
    const denied = Object.assign(new Error(SECRET), { name: "NatsError", code: "PERMISSIONS_VIOLATION" });
    assert.equal(publicError(denied).status, 500);
  });

  test("api, gateway, gateway-raw and openai shapes", () => {
    const e = new BerthError("not_found", "stub x not found");
    assert.deepEqual(publicError(e), {
      status: 404,
      headers: {},
      body: { error: { code: "not_found", message: "stub x not found" } },
      error: e,
    });
    const gw = publicError(e, { shape: "gateway" });
    assert.equal(gw.status, 200);
    assert.deepEqual(gw.body, { ok: false, error: { code: "not_found", message: "stub x not found" } });
    assert.equal(publicError(new BerthError("unauthenticated", "no"), { shape: "gateway" }).status, 401);
    assert.equal(publicError(e, { shape: "gateway-raw" }).status, 404);
    const oa = publicError(new BerthError("limit_exceeded", "too many"), { shape: "openai" });
    assert.equal(oa.status, 429);
    assert.deepEqual(oa.body, {
      error: { message: "too many", type: "rate_limit_error", code: "limit_exceeded" },
    });
    const oi = publicError(new RangeError(SECRET), { shape: "openai" });
    assert.equal(oi.status, 500);
    assert.equal((oi.body as { error: { type: string } }).error.type, "server_error");
    assert.ok(!JSON.stringify(oi.body).includes(SECRET));
  });

  test("refusal status, headers and extra body fields", () => {
    const pe = publicError(
      new HttpRefusal("invalid_request", "POST only", { status: 405, headers: { allow: "POST" } }),
      {
        extra: { task_id: "t-1" },
      },
    );
    assert.equal(pe.status, 405);
    assert.deepEqual(pe.headers, { allow: "POST" });
    assert.deepEqual(pe.body, { error: { code: "invalid_request", message: "POST only" }, task_id: "t-1" });
  });
});

// ---- per path: the internal error's text never reaches the client ------------

async function listen(t: TestContext, server: Server): Promise<string> {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { headers });
  return { status: res.status, body: await res.json() };
}

/** An upgrade that is refused: the status and JSON body written on the socket. */
function upgrade(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        ...headers,
      },
    });
    req.on("upgrade", () => reject(new Error("the upgrade was accepted")));
    req.on("response", (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString()) }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

const failingTokens = {
  authenticate: async () => {
    throw new TypeError(SECRET);
  },
  touch: async () => {},
} as unknown as TokenRepo;

describe("an internal error's text reaches no client", () => {
  test("Fastify route and gateway route", async () => {
    const c = captureLog();
    const app = Fastify({
      loggerInstance: c.log as unknown as FastifyBaseLogger,
    }) as unknown as FastifyInstance;
    installErrorHandlers(app);
    app.get("/api/v1/boom", async () => {
      throw new TypeError(SECRET);
    });
    await app.register(async (gw) => {
      installGatewayErrors(gw);
      gw.get("/api/v1/gateway/boom", async () => {
        throw new BerthError("internal", SECRET);
      });
    });
    const r = await app.inject({ url: "/api/v1/boom" });
    assert.equal(r.statusCode, 500);
    assert.equal(r.json().error.code, "internal");
    assertMasked(r.json(), c, "route");
    const g = await app.inject({ url: "/api/v1/gateway/boom" });
    assert.equal(g.statusCode, 200);
    assert.equal(g.json().ok, false);
    assertMasked(g.json(), c, "gateway");
    await app.close();
  });

  test("raw endpoint path and endpoint websocket", async (t) => {
    const c = captureLog();
    const endpoints = {
      deps: { log: c.log },
      serveHttp: async () => {
        throw new TypeError(SECRET);
      },
      resolve: async () => {
        throw new TypeError(SECRET);
      },
    } as unknown as EndpointDispatcher;
    const server = createServer((req, res) => void serveEndpointRequest(endpoints, req, res));
    attachEndpointUpgrades(server, endpoints);
    const base = await listen(t, server);
    const r = await get(`${base}/endpoint/x`);
    assert.equal(r.status, 500);
    assertMasked(r.body, c, "endpoint");
    const u = await upgrade(`${base}/endpoint/x`);
    assert.equal(u.status, 500);
    assertMasked(u.body, c, "endpoint websocket");
  });

  test("exposed port: plain request and websocket", async (t) => {
    const c = captureLog();
    const ports = new PortProxy({
      targets: {
        find: async () => {
          throw new TypeError(SECRET);
        },
      },
      tunnels: {} as never,
      tokens: failingTokens,
      log: c.log,
    });
    const server = createServer((req, res) => void ports.serveHttp(req, res));
    attachPortUpgrades(server, ports);
    const base = await listen(t, server);
    const r = await get(`${base}/port/ctr-1/8080/`);
    assert.equal(r.status, 500);
    assertMasked(r.body, c, "port");
    const u = await upgrade(`${base}/port/ctr-1/8080/`);
    assert.equal(u.status, 500);
    assertMasked(u.body, c, "port websocket");
  });

  test("shell websocket refusal", async (t) => {
    const c = captureLog();
    const server = createServer((_req, res) => res.end());
    attachShellUpgrades(server, {
      tokens: failingTokens,
      targets: [],
      agents: { client: () => ({}) as never },
      log: c.log,
    });
    const base = await listen(t, server);
    const u = await upgrade(`${base}/api/v1/container/ws-1/ctr-1/shell`, { authorization: "Bearer tok" });
    assert.equal(u.status, 500);
    assertMasked(u.body, c, "shell");
  });
});
