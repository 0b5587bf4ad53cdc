// The database routes through inject(), over the real DatabaseService,
// sandbox service, secret service and SQLite store with a fake agent
// (test/databases/fakes.ts): the spec's GET/POST /database/{ws}, the
// per-database routes, workspace scoping and refusals.

import assert from "node:assert/strict";
import { test } from "node:test";
import { databaseRoutes } from "../../coordinator/databases/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { bearer } from "../helpers/auth.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { databaseWorld } from "./fakes.ts";

async function setup(t: { after: (fn: () => unknown) => void }) {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  const app = routesApp();
  await app.register(tokenScope(d.w.store.tokens, databaseRoutes(d.db)));
  t.after(() => app.close());
  const ws = (await d.w.store.workspaces.get(d.w.ws))?.externalId as string;
  const otherWs = (await d.w.store.workspaces.get(d.w.otherWs))?.externalId as string;
  const token = (await d.w.store.tokens.create(d.w.ws)).secret;
  const otherToken = (await d.w.store.tokens.create(d.w.otherWs)).secret;
  const call = async (
    method: "GET" | "POST" | "DELETE",
    url: string,
    payload?: unknown,
    tok: string | null = token,
  ) => {
    const r = await app.inject({
      method,
      url: `/api/v1${url}`,
      headers: tok === null ? {} : bearer(tok),
      ...(payload !== undefined ? { payload: payload as object } : {}),
    });
    return { status: r.statusCode, body: r.json() };
  };
  return { d, ws, otherWs, otherToken, call };
}

test("POST creates (201, ready), GET lists; get, stop, start, restart, delete by name", async (t) => {
  const { d, ws, call } = await setup(t);
  const created = await call("POST", `/database/${ws}`, { engine: "postgres", name: "main" });
  assert.equal(created.status, 201);
  assert.deepEqual(
    [
      created.body.name,
      created.body.engine,
      created.body.status,
      created.body.secret_name,
      created.body.local_port,
    ],
    ["main", "postgres", "running", "DB_MAIN_URL", 15432],
  );
  const url = (await d.secrets.resolve(d.w.ws, ["DB_MAIN_URL"])).DB_MAIN_URL as string;
  const password = /:([0-9a-f]{32})@/.exec(url)?.[1] as string;
  assert.doesNotMatch(JSON.stringify(created.body), new RegExp(password), "no answer carries the password");

  await call("POST", `/database/${ws}`, { engine: "redis", name: "cache", memory: 256 });
  const list = await call("GET", `/database/${ws}`);
  assert.equal(list.status, 200);
  assert.deepEqual(
    list.body.databases.map((x: { name: string; engine: string }) => [x.name, x.engine]),
    [
      ["cache", "redis"],
      ["main", "postgres"],
    ],
  );
  assert.equal((await call("GET", `/database/${ws}/main`)).body.status, "running");
  const stopped = await call("POST", `/database/${ws}/main/stop`);
  assert.deepEqual([stopped.status, stopped.body.status, stopped.body.pod_id], [200, "stopped", null]);
  assert.equal((await call("POST", `/database/${ws}/main/start`)).body.status, "running");
  const restarted = await call("POST", `/database/${ws}/main/restart`);
  assert.equal(restarted.body.status, "running");
  assert.deepEqual((await call("DELETE", `/database/${ws}/main`)).body, { deleted: true });
  assert.deepEqual(d.removedVolumes, [], "data kept unless asked");
  assert.equal((await call("GET", `/database/${ws}/main`)).status, 404);
  assert.deepEqual((await call("DELETE", `/database/${ws}/cache?delete_data=true`)).body, { deleted: true });
  assert.deepEqual(d.removedVolumes, [`${d.w.ws}/db-cache`]);
});

test("refusals: bad engine or name 400, a taken name 409, no token 401", async (t) => {
  const { ws, call } = await setup(t);
  const bad = await call("POST", `/database/${ws}`, { engine: "mysql", name: "x" });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.code, "invalid_request");
  assert.match(
    bad.body.error.message,
    /database engine "mysql" is not one berth runs: use postgres or redis/,
  );
  const badName = await call("POST", `/database/${ws}`, { engine: "redis", name: "UPPER" });
  assert.equal(badName.status, 400);
  assert.match(badName.body.error.message, /database name "UPPER" is not valid/);
  assert.equal((await call("POST", `/database/${ws}`, { engine: "redis" })).status, 400);
  assert.equal((await call("POST", `/database/${ws}`, { engine: "redis", name: "a", extra: 1 })).status, 400);
  assert.equal((await call("POST", `/database/${ws}`, { engine: "redis", name: "a" })).status, 201);
  const again = await call("POST", `/database/${ws}`, { engine: "postgres", name: "a" });
  assert.deepEqual([again.status, again.body.error.code], [409, "conflict"]);
  assert.equal((await call("GET", `/database/${ws}`, undefined, null)).status, 401);
});

test("another workspace's database is 404 on every route, with either workspace id", async (t) => {
  const { d, ws, otherWs, otherToken, call } = await setup(t);
  await call("POST", `/database/${ws}`, { engine: "postgres", name: "main" });
  // The other token on its own workspace: the database is not there.
  for (const [m, u] of [
    ["GET", `/database/${otherWs}/main`],
    ["POST", `/database/${otherWs}/main/stop`],
    ["POST", `/database/${otherWs}/main/start`],
    ["POST", `/database/${otherWs}/main/restart`],
    ["DELETE", `/database/${otherWs}/main?delete_data=true`],
  ] as const) {
    const r = await call(m, u, undefined, otherToken);
    assert.deepEqual([r.status, r.body.error.code], [404, "not_found"], `${m} ${u}`);
  }
  assert.deepEqual((await call("GET", `/database/${otherWs}`, undefined, otherToken)).body, {
    databases: [],
  });
  // The other token naming this workspace: the workspace itself is not found.
  for (const [m, u] of [
    ["GET", `/database/${ws}`],
    ["POST", `/database/${ws}`],
    ["GET", `/database/${ws}/main`],
    ["DELETE", `/database/${ws}/main`],
  ] as const) {
    const r = await call(m, u, m === "POST" ? { engine: "postgres", name: "x" } : undefined, otherToken);
    assert.equal(r.status, 404, `${m} ${u}`);
  }
  assert.equal((await d.db.get(d.w.ws, "main")).status, "running");
  assert.deepEqual(d.removedVolumes, []);
});
