// The secret routes through Fastify inject: auth, workspace scoping (another
// workspace's secret is 404), 201/200/204, 409, validation errors, and the
// value never coming back.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { secretsHttpRoutes } from "../../coordinator/secrets/index.ts";
import { bareHttpApp } from "../helpers/bare-app.ts";
import type { SecretService } from "../../coordinator/secrets/index.ts";
import { Store } from "../../coordinator/records.ts";
import { tempDir } from "../helpers/env.ts";
import { storeJoinService } from "../helpers/join.ts";
import { twoWorkspaces } from "../helpers/nats-store.ts";
import { bearerInject } from "../helpers/routes-app.ts";
import { secretService } from "./helpers.ts";
import { bearer } from "../helpers/auth.ts";

/** The coordinator's HTTP app over a real SQLite store and secret service. */
export async function secretsApp(cleanups: (() => unknown)[]) {
  const store = await Store.open(`sqlite:${tempDir({ after: (fn) => cleanups.push(fn) })}/b.db`);
  cleanups.unshift(() => store.close());
  const join = await storeJoinService(store);
  const secrets = secretService(store);
  const app = await bareHttpApp({ store, fleet: new FleetView(), join, areas: [secretsHttpRoutes(secrets)] });
  cleanups.unshift(() => app.close());
  return { app, store, secrets };
}

describe("secret routes (inject)", () => {
  let app: FastifyInstance;
  let store: Store;
  let secrets: SecretService;
  let token: string;
  let wsExt: string;
  let wsId: string;
  let otherToken: string;
  let otherExt: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    ({ app, store, secrets } = await secretsApp(cleanups));
    const two = await twoWorkspaces(store, "secrets");
    ({ token, otherToken } = two);
    wsExt = two.ws.externalId;
    wsId = two.ws.id;
    otherExt = two.other.externalId;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const call = bearerInject(
    () => app,
    () => token,
  );

  test("create 201, list, update 200, delete 204; the value is never in a response", async () => {
    const value = "sk-live-value-1234";
    const c = await call("POST", `/api/v1/secret/${wsExt}`, { name: "OPENAI_API_KEY", value });
    assert.equal(c.statusCode, 201, c.body);
    const created = c.json();
    assert.deepEqual(Object.keys(created).sort(), ["created_at", "name", "updated_at"]);
    assert.equal(created.name, "OPENAI_API_KEY");
    assert.ok(!c.body.includes(value));

    const l = await call("GET", `/api/v1/secret/${wsExt}`);
    assert.equal(l.statusCode, 200);
    assert.deepEqual(l.json(), { secrets: [created] });
    assert.ok(!l.body.includes(value));

    const u = await call("PUT", `/api/v1/secret/${wsExt}/OPENAI_API_KEY`, { value: "sk-new-value" });
    assert.equal(u.statusCode, 200, u.body);
    assert.equal(u.json().name, "OPENAI_API_KEY");
    assert.equal(u.json().created_at, created.created_at);
    assert.ok(!u.body.includes("sk-new-value"));
    assert.deepEqual(await secrets.resolve(wsId, ["OPENAI_API_KEY"]), { OPENAI_API_KEY: "sk-new-value" });

    const d = await call("DELETE", `/api/v1/secret/${wsExt}/OPENAI_API_KEY`);
    assert.equal(d.statusCode, 204);
    assert.equal(d.body, "");
    assert.deepEqual((await call("GET", `/api/v1/secret/${wsExt}`)).json(), { secrets: [] });
    const again = await call("DELETE", `/api/v1/secret/${wsExt}/OPENAI_API_KEY`);
    assert.equal(again.statusCode, 404);
    assert.deepEqual(again.json().error, {
      code: "not_found",
      message: "secret OPENAI_API_KEY not found",
      details: { name: "OPENAI_API_KEY" },
    });
  });

  test("an existing name is 409 and keeps the first value", async () => {
    assert.equal(
      (await call("POST", `/api/v1/secret/${wsExt}`, { name: "DUP", value: "first" })).statusCode,
      201,
    );
    const r = await call("POST", `/api/v1/secret/${wsExt}`, { name: "DUP", value: "second" });
    assert.equal(r.statusCode, 409);
    assert.equal(r.json().error.code, "conflict");
    assert.match(r.json().error.message, /secret DUP already exists/);
    assert.ok(!r.body.includes("second"));
    assert.deepEqual(await secrets.resolve(wsId, ["DUP"]), { DUP: "first" });
  });

  test("no token or a bad token is 401", async () => {
    for (const headers of [{}, bearer("bt_unknown")]) {
      for (const [method, url] of [
        ["GET", `/api/v1/secret/${wsExt}`],
        ["POST", `/api/v1/secret/${wsExt}`],
        ["PUT", `/api/v1/secret/${wsExt}/X`],
        ["DELETE", `/api/v1/secret/${wsExt}/X`],
      ] as const) {
        const r = await app.inject({ method, url, headers, payload: { name: "X", value: "v" } });
        assert.equal(r.statusCode, 401, `${method} ${url}`);
        assert.equal(r.json().error.code, "unauthenticated");
      }
    }
  });

  test("another workspace's secrets are 404 on every route and stay untouched", async () => {
    await call("POST", `/api/v1/secret/${wsExt}`, { name: "MINE", value: "mine" });
    const attempts = [
      await call("GET", `/api/v1/secret/${wsExt}`, undefined, otherToken),
      await call("POST", `/api/v1/secret/${wsExt}`, { name: "INTRUDER", value: "x" }, otherToken),
      await call("PUT", `/api/v1/secret/${wsExt}/MINE`, { value: "stolen" }, otherToken),
      await call("DELETE", `/api/v1/secret/${wsExt}/MINE`, undefined, otherToken),
    ];
    for (const r of attempts) {
      assert.equal(r.statusCode, 404, r.body);
      assert.deepEqual(r.json().error, { code: "not_found", message: `workspace ${wsExt} not found` });
    }
    // Under its own workspace path, the other token sees only its own (empty) list and no MINE.
    assert.deepEqual((await call("GET", `/api/v1/secret/${otherExt}`, undefined, otherToken)).json(), {
      secrets: [],
    });
    const del = await call("DELETE", `/api/v1/secret/${otherExt}/MINE`, undefined, otherToken);
    assert.equal(del.statusCode, 404);
    assert.deepEqual(await secrets.resolve(wsId, ["MINE"]), { MINE: "mine" });
    assert.ok(!(await secrets.list(wsId)).some((s) => s.name === "INTRUDER"));
  });

  test("validation errors are 400 with the cause and no stack", async () => {
    const bad: [string, string, unknown, RegExp][] = [
      [
        "POST",
        `/api/v1/secret/${wsExt}`,
        { name: "BAD-NAME", value: "v" },
        /not an environment variable name/,
      ],
      ["POST", `/api/v1/secret/${wsExt}`, { name: "BERTH_STUB_ID", value: "v" }, /reserved/],
      ["POST", `/api/v1/secret/${wsExt}`, { name: "N".repeat(129), value: "v" }, /at most 128/],
      [
        "POST",
        `/api/v1/secret/${wsExt}`,
        { name: "BIG", value: "x".repeat(65 * 1024) },
        /66560 bytes; at most 65536/,
      ],
      ["POST", `/api/v1/secret/${wsExt}`, { name: "NO_VALUE" }, /value/],
      ["POST", `/api/v1/secret/${wsExt}`, { value: "v" }, /name/],
      // The API's schemas coerce scalars (42 becomes "42"), as on every route; an object is refused.
      ["POST", `/api/v1/secret/${wsExt}`, { name: "X", value: { a: 1 } }, /value.*string/],
      ["POST", `/api/v1/secret/${wsExt}`, { name: "X", value: "v", extra: 1 }, /additional properties/],
      ["PUT", `/api/v1/secret/${wsExt}/X`, { value: [1, 2] }, /value.*string/],
      ["PUT", `/api/v1/secret/${wsExt}/X`, {}, /value/],
      ["PUT", `/api/v1/secret/${wsExt}/BAD-NAME`, { value: "v" }, /not an environment variable name/],
    ];
    for (const [method, url, payload, message] of bad) {
      const r = await call(method as "POST", url, payload);
      assert.equal(r.statusCode, 400, `${JSON.stringify(payload)}: ${r.body}`);
      assert.equal(r.json().error.code, "invalid_request");
      assert.match(r.json().error.message, message, JSON.stringify(payload));
      assert.ok(!r.body.includes("    at "), "no stack trace");
    }
    const notJson = await app.inject({
      method: "POST",
      url: `/api/v1/secret/${wsExt}`,
      headers: { ...bearer(token), "content-type": "application/json" },
      payload: "{name:",
    });
    assert.equal(notJson.statusCode, 400);
    assert.equal(notJson.json().error.code, "invalid_json");
    const missing = await call("PUT", `/api/v1/secret/${wsExt}/NEVER_MADE`, { value: "v" });
    assert.equal(missing.statusCode, 404);
    assert.equal(missing.json().error.message, "secret NEVER_MADE not found");
  });
});
