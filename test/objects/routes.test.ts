// Queue, Map and Signal over HTTP: the SDK's gateway route and the REST
// inspection routes, with a real SQLite store (tokens), a real nats-server
// and two workspaces. Another workspace's objects are not found.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { connect } from "nats";
import { gatewayStateRoutes, stateRoutes } from "../../coordinator/state/routes.ts";
import { gatewayScope, tokenScope } from "../../coordinator/http/scopes.ts";
import { MapStore } from "../../coordinator/state/maps.ts";
import { QueueStore } from "../../coordinator/state/queues.ts";
import { SignalStore } from "../../coordinator/state/signals.ts";
import { StateObjects } from "../../coordinator/state/state.ts";
import { Store } from "../../coordinator/records.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { bearerInject, routesApp } from "../helpers/routes-app.ts";
import { tempDir } from "../helpers/env.ts";
import { startTestNats } from "../helpers/nats.ts";

const b64 = (s: string) => Buffer.from(s).toString("base64");

describe("queue, map and signal routes", () => {
  const cleanups: (() => unknown)[] = [];
  const later = { after: (fn: () => unknown) => cleanups.push(fn) };
  let app: FastifyInstance;
  let a: Workspace;
  let b: Workspace;
  let tokenA: string;
  let tokenB: string;
  const call = bearerInject(
    () => app,
    () => tokenA,
  );

  before(async () => {
    const nats = await startTestNats(later);
    const dir = tempDir(later);
    const store = await Store.open(`sqlite:${dir}/berth.db`);
    cleanups.push(() => store.close());
    const nc = await connect({
      servers: nats.url,
      user: nats.coordinator.user,
      pass: nats.coordinator.password,
    });
    cleanups.push(() => closeNats(nc));
    const state = new StateObjects(
      new QueueStore({ nc, limits: { maxItemBytes: 32 } }),
      new MapStore(nc),
      new SignalStore(nc),
      {
        // As the relay router answers model.chat with the bots' handler.
        foreign: {
          dispatch: async (c) => ({
            response: { op: c.op, ws: c.workspaceId, model: (c.json().body as { model: string }).model },
          }),
        },
      },
    );
    await state.signals.start();
    cleanups.push(() => state.signals.stop());
    a = await store.workspaces.create("a");
    b = await store.workspaces.create("b");
    tokenA = (await store.tokens.create(a.id, { name: "a" })).secret;
    tokenB = (await store.tokens.create(b.id, { name: "b" })).secret;
    app = routesApp();
    await app.register(tokenScope(store.tokens, stateRoutes(state)));
    await app.register(gatewayScope(store.tokens, gatewayStateRoutes(state)));
    await app.ready();
    cleanups.push(() => app.close());
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  const op = async (body: object, token = tokenA) =>
    (await call("POST", "/api/v1/gateway/state", body, token)).json();

  test("the gateway route puts, pops, sets and reads in the token's workspace", async () => {
    assert.deepEqual(await op({ op: "queue.put", name: "jobs", value: b64("one") }), { ok: true });
    assert.deepEqual(await op({ op: "queue.put", name: "jobs", value: b64("two") }), { ok: true });
    assert.deepEqual(await op({ op: "queue.size", name: "jobs" }), { ok: true, size: 2 });
    assert.deepEqual(await op({ op: "queue.pop", name: "jobs" }), { ok: true, value: b64("one") });
    assert.deepEqual(await op({ op: "queue.pop", name: "jobs" }, tokenB), { ok: true, value: null });
    assert.deepEqual(await op({ op: "map.set", name: "seen", key: "k.1", value: b64("v") }), { ok: true });
    assert.deepEqual(await op({ op: "map.get", name: "seen", key: "k.1" }), { ok: true, value: b64("v") });
    assert.deepEqual(await op({ op: "map.get", name: "seen", key: "k.1" }, tokenB), {
      ok: true,
      value: null,
    });
    assert.deepEqual(await op({ op: "map.items", name: "seen" }), {
      ok: true,
      items: [["k.1", b64("v")]],
      next: null,
    });
    const set = await op({ op: "signal.set", name: "reload", ttl: 60 });
    assert.equal(set.signal.set, true);
    assert.equal((await op({ op: "signal.state", name: "reload" }, tokenB)).signal.set, false);
  });

  test("model.chat, which another area serves, is answered through the relay's handlers", async () => {
    assert.deepEqual(await op({ op: "model.chat", body: { model: "tiny", messages: [] } }), {
      ok: true,
      response: { op: "model.chat", ws: a.id, model: "tiny" },
    });
  });

  test("bad names, ops and oversized items answer ok:false with the reason", async () => {
    const bad = await op({ op: "queue.put", name: "no.dots", value: b64("x") });
    assert.equal(bad.ok, false);
    assert.equal(bad.error.code, "invalid_request");
    assert.match(bad.error.message, /queue name "no.dots" is not valid/);
    assert.equal((await op({ op: "queue.drop", name: "jobs" })).ok, false);
    const big = await op({ op: "queue.put", name: "jobs", value: b64("x".repeat(33)) });
    assert.equal(big.error.code, "resource_exhausted");
    assert.match(big.error.message, /32-byte item limit/);
    const ttl = await op({ op: "signal.set", name: "reload", ttl: 0 });
    assert.equal(ttl.error.code, "invalid_request");
  });

  test("REST lists, reads and deletes; another workspace's {ws} is 404", async () => {
    const ws = a.externalId;
    assert.deepEqual((await call("GET", `/api/v1/queue/${ws}`)).json(), {
      queues: [{ name: "jobs", size: 1 }],
    });
    assert.deepEqual((await call("GET", `/api/v1/queue/${ws}/jobs`)).json(), { name: "jobs", size: 1 });
    assert.deepEqual((await call("GET", `/api/v1/map/${ws}`)).json(), { maps: [{ name: "seen", size: 1 }] });
    assert.deepEqual((await call("GET", `/api/v1/map/${ws}/seen`)).json(), {
      name: "seen",
      size: 1,
      keys: ["k.1"],
    });
    assert.deepEqual(
      (await call("GET", `/api/v1/signal/${ws}`)).json().signals.map((s: { name: string }) => s.name),
      ["reload"],
    );
    for (const path of ["queue", "map", "signal"]) {
      const r = await call("GET", `/api/v1/${path}/${ws}`, undefined, tokenB);
      assert.equal(r.statusCode, 404, path);
      assert.equal(r.json().error.code, "not_found");
    }
    assert.equal((await call("DELETE", `/api/v1/queue/${ws}/jobs`, undefined, tokenB)).statusCode, 404);
    assert.equal((await call("GET", `/api/v1/queue/${ws}/bad.name`)).statusCode, 400);
    // B's own view of the same names: nothing.
    assert.deepEqual((await call("GET", `/api/v1/queue/${b.externalId}`, undefined, tokenB)).json(), {
      queues: [],
    });
    assert.equal(
      (await call("DELETE", `/api/v1/map/${b.externalId}/seen`, undefined, tokenB)).statusCode,
      404,
    );

    assert.deepEqual((await call("DELETE", `/api/v1/queue/${ws}/jobs`)).json(), { name: "jobs", deleted: 1 });
    assert.equal((await call("DELETE", `/api/v1/queue/${ws}/jobs`)).statusCode, 404);
    assert.deepEqual((await call("DELETE", `/api/v1/map/${ws}/seen`)).json(), { name: "seen", deleted: 1 });
    assert.equal((await call("POST", `/api/v1/signal/${ws}/reload/clear`)).statusCode, 200);
    assert.equal((await call("POST", `/api/v1/signal/${ws}/reload/clear`)).statusCode, 404);
    const set = await call("POST", `/api/v1/signal/${ws}/reload/set`, { ttl: 5 });
    assert.equal(set.json().set, true);
    assert.equal((await call("GET", `/api/v1/signal/${ws}/reload`)).json().set, true);
  });
});
