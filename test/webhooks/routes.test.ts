// The webhook routes through Fastify inject: auth (401), another workspace's
// webhooks (404 on every route), refused URLs and patterns with the cause,
// the signing secret shown once, update/delete/test/deliveries end to end
// against a real consumer.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { webhookRoutes } from "../../coordinator/webhooks/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { Store } from "../../coordinator/records.ts";
import { VALID_EVENT_PATTERNS } from "../../coordinator/webhooks/index.ts";
import { tempDir } from "../helpers/env.ts";
import {
  COORDINATOR_PORT,
  COORDINATOR_PUBLIC_URL,
  MemoryFeed,
  event,
  startReceiver,
  webhookSystem,
} from "./helpers.ts";
import { twoWorkspaces } from "../helpers/nats-store.ts";
import { bearerInject, routesApp } from "../helpers/routes-app.ts";
import { bearer } from "../helpers/auth.ts";

describe("webhook routes (inject)", () => {
  let app: FastifyInstance;
  let store: Store;
  let system: ReturnType<typeof webhookSystem>;
  let feed: MemoryFeed;
  let token: string;
  let wsExt: string;
  let ws: { id: string; externalId: string };
  let otherToken: string;
  let otherExt: string;
  const cleanups: (() => unknown)[] = [];
  const hooks = { after: (fn: () => unknown) => cleanups.push(fn) };

  before(async () => {
    store = await Store.open(`sqlite:${tempDir(hooks)}/b.db`);
    cleanups.push(() => store.close());
    system = webhookSystem(store, { timeoutMs: 300 });
    feed = new MemoryFeed();
    await system.dispatcher.start(feed);
    cleanups.unshift(() => system.dispatcher.stop());
    app = routesApp();
    await app.register(tokenScope(store.tokens, webhookRoutes(system.service)));
    cleanups.unshift(() => app.close());
    const two = await twoWorkspaces(store, "hooks");
    ({ ws, token, otherToken } = two);
    wsExt = ws.externalId;
    otherExt = two.other.externalId;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  const call = bearerInject(
    () => app,
    () => token,
  );

  test("the list pages with limit and cursor, oldest first; a foreign or altered cursor is 400", async () => {
    const rx = await startReceiver(hooks);
    const made: string[] = [];
    for (let i = 0; i < 3; i++) {
      const c = await call("POST", `/api/v1/webhook/${wsExt}`, { url: rx.url(`/page${i}`) });
      made.push(c.json().id);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const r = await call("GET", `/api/v1/webhook/${wsExt}?limit=2${cursor ? `&cursor=${cursor}` : ""}`);
      assert.equal(r.statusCode, 200, r.body);
      const body = r.json() as { webhooks: { id: string }[]; next_cursor: string | null };
      assert.ok(body.webhooks.length <= 2);
      seen.push(...body.webhooks.map((w) => w.id));
      cursor = body.next_cursor;
    } while (cursor);
    for (const id of made) assert.equal(seen.filter((s) => s === id).length, 1, `${id} listed exactly once`);
    const bad = await call("GET", `/api/v1/webhook/${wsExt}?cursor=bm90LWEtY3Vyc29y`);
    assert.equal(bad.statusCode, 400);
    assert.match(bad.json().error.message, /invalid cursor/);
    for (const id of made) await call("DELETE", `/api/v1/webhook/${wsExt}/${id}`);
  });

  test("create 201 with the secret once; list, update, test, deliveries and delete", async () => {
    const rx = await startReceiver(hooks);
    const c = await call("POST", `/api/v1/webhook/${wsExt}`, {
      url: rx.url("/hook"),
      event_types: ["task.*", "stub.deploy"],
      description: "ci notifications",
    });
    assert.equal(c.statusCode, 201, c.body);
    const created = c.json();
    assert.match(created.id, /^wh-/);
    assert.match(created.signing_secret, /^whsec_[A-Za-z0-9_-]{43}$/);
    assert.deepEqual(created.event_types, ["task.*", "stub.deploy"]);
    assert.equal(created.description, "ci notifications");
    assert.equal(created.enabled, true);
    const secret: string = created.signing_secret;
    const { signing_secret: _, ...record } = created;

    const l = await call("GET", `/api/v1/webhook/${wsExt}`);
    assert.equal(l.statusCode, 200);
    assert.deepEqual(l.json(), { webhooks: [record], next_cursor: null });
    assert.ok(!l.body.includes(secret.slice(6)), "the secret is never listed");

    const u = await call("PATCH", `/api/v1/webhook/${wsExt}/${created.id}`, {
      enabled: false,
      description: "off",
    });
    assert.equal(u.statusCode, 200, u.body);
    assert.equal(u.json().enabled, false);
    assert.equal(u.json().description, "off");
    assert.deepEqual(u.json().event_types, ["task.*", "stub.deploy"]);
    assert.ok(!u.body.includes(secret.slice(6)));
    feed.publish(event(ws, "task.complete"));
    await system.dispatcher.idle();
    assert.equal(rx.got.length, 0, "a disabled webhook gets no events");

    const t = await call("POST", `/api/v1/webhook/${wsExt}/${created.id}/test`);
    assert.equal(t.statusCode, 200, t.body);
    const { delivery } = t.json();
    assert.equal(delivery.event_type, "webhook.test");
    assert.equal(delivery.status_code, 204);
    assert.equal(delivery.ok, true);
    assert.equal(delivery.error, null);
    const [got] = rx.got;
    assert.equal(got?.headers["x-service-delivery"], delivery.event_id);
    assert.equal(
      got?.headers["x-service-signature"],
      `sha256=${createHmac("sha256", secret)
        .update(got?.body ?? "")
        .digest("hex")}`,
    );
    assert.equal(
      (await call("POST", `/api/v1/webhook/${wsExt}/${created.id}/test`, {})).statusCode,
      200,
      "an empty JSON body is accepted",
    );

    await call("PATCH", `/api/v1/webhook/${wsExt}/${created.id}`, { enabled: true });
    feed.publish(event(ws, "task.failed"));
    await rx.waitFor(3);
    await system.dispatcher.idle();
    const d = await call("GET", `/api/v1/webhook/${wsExt}/${created.id}/deliveries`);
    assert.equal(d.statusCode, 200, d.body);
    assert.deepEqual(
      d
        .json()
        .deliveries.map((x: { event_type: string }) => x.event_type)
        .sort(),
      ["task.failed", "webhook.test", "webhook.test"],
    );
    assert.equal(
      (await call("GET", `/api/v1/webhook/${wsExt}/${created.id}/deliveries?limit=1`)).json().deliveries
        .length,
      1,
    );

    const del = await call("DELETE", `/api/v1/webhook/${wsExt}/${created.id}`);
    assert.equal(del.statusCode, 204);
    assert.equal(del.body, "");
    assert.deepEqual((await call("GET", `/api/v1/webhook/${wsExt}`)).json(), {
      webhooks: [],
      next_cursor: null,
    });
    const again = await call("DELETE", `/api/v1/webhook/${wsExt}/${created.id}`);
    assert.equal(again.statusCode, 404);
    assert.deepEqual(again.json().error, {
      code: "not_found",
      message: `webhook ${created.id} not found`,
      details: { id: created.id },
    });
  });

  test("no token or a bad token is 401 on every route", async () => {
    for (const headers of [{}, bearer("bt_unknown")]) {
      for (const [method, url] of [
        ["GET", `/api/v1/webhook/${wsExt}`],
        ["POST", `/api/v1/webhook/${wsExt}`],
        ["PATCH", `/api/v1/webhook/${wsExt}/wh-x`],
        ["DELETE", `/api/v1/webhook/${wsExt}/wh-x`],
        ["POST", `/api/v1/webhook/${wsExt}/wh-x/test`],
        ["GET", `/api/v1/webhook/${wsExt}/wh-x/deliveries`],
      ] as const) {
        const r = await app.inject({ method, url, headers, payload: method === "GET" ? undefined : {} });
        assert.equal(r.statusCode, 401, `${method} ${url}`);
        assert.equal(r.json().error.code, "unauthenticated");
      }
    }
  });

  test("another workspace's webhooks are 404 on every route and stay untouched", async () => {
    const rx = await startReceiver(hooks);
    const mine = (await call("POST", `/api/v1/webhook/${wsExt}`, { url: rx.url("/mine") })).json();
    const attempts = [
      await call("GET", `/api/v1/webhook/${wsExt}`, undefined, otherToken),
      await call("POST", `/api/v1/webhook/${wsExt}`, { url: rx.url("/intruder") }, otherToken),
      await call("PATCH", `/api/v1/webhook/${wsExt}/${mine.id}`, { url: rx.url("/stolen") }, otherToken),
      await call("DELETE", `/api/v1/webhook/${wsExt}/${mine.id}`, undefined, otherToken),
      await call("POST", `/api/v1/webhook/${wsExt}/${mine.id}/test`, undefined, otherToken),
      await call("GET", `/api/v1/webhook/${wsExt}/${mine.id}/deliveries`, undefined, otherToken),
    ];
    for (const r of attempts) {
      assert.equal(r.statusCode, 404, r.body);
      assert.deepEqual(r.json().error, { code: "not_found", message: `workspace ${wsExt} not found` });
    }
    // Under its own workspace path, the other token finds no such webhook.
    const own = [
      await call("PATCH", `/api/v1/webhook/${otherExt}/${mine.id}`, { enabled: false }, otherToken),
      await call("DELETE", `/api/v1/webhook/${otherExt}/${mine.id}`, undefined, otherToken),
      await call("POST", `/api/v1/webhook/${otherExt}/${mine.id}/test`, undefined, otherToken),
      await call("GET", `/api/v1/webhook/${otherExt}/${mine.id}/deliveries`, undefined, otherToken),
    ];
    for (const r of own) {
      assert.equal(r.statusCode, 404, r.body);
      assert.equal(r.json().error.message, `webhook ${mine.id} not found`);
    }
    assert.deepEqual((await call("GET", `/api/v1/webhook/${otherExt}`, undefined, otherToken)).json(), {
      webhooks: [],
      next_cursor: null,
    });
    assert.equal(rx.got.length, 0, "no test delivery went out");
    const list = (await call("GET", `/api/v1/webhook/${wsExt}`)).json().webhooks;
    assert.deepEqual(
      list.find((w: { id: string }) => w.id === mine.id),
      (({ signing_secret: _, ...r }) => r)(mine),
    );
    await call("DELETE", `/api/v1/webhook/${wsExt}/${mine.id}`);
  });

  test("bad URLs, URLs of this coordinator and unknown patterns are 400 with the cause", async () => {
    const bad: [unknown, RegExp][] = [
      [{ url: "ftp://example.com/x" }, /must be http or https, not ftp/],
      [{ url: "not a url" }, /is not a URL/],
      [{ url: "" }, /needs a url/],
      [{ url: "https://user:pw@example.com/" }, /user name or password/],
      [{ url: `https://example.com/${"x".repeat(2100)}` }, /at most 2048/],
      [{ url: `${COORDINATOR_PUBLIC_URL}/api/v1/webhook/x` }, /points at this coordinator/],
      [{ url: "https://BERTH.example.com:443/hook" }, /points at this coordinator/],
      [{ url: `http://127.0.0.1:${COORDINATOR_PORT}/hook` }, /points at this coordinator/],
      [{ url: `http://localhost:${COORDINATOR_PORT}/` }, /points at this coordinator/],
      [{ url: `http://[::1]:${COORDINATOR_PORT}/` }, /points at this coordinator/],
      [{ url: `http://[::ffff:127.0.0.1]:${COORDINATOR_PORT}/` }, /points at this coordinator/],
      [{ url: `http://127.0.0.2:${COORDINATOR_PORT}/` }, /points at this coordinator/],
      [{ url: `http://0.0.0.0:${COORDINATOR_PORT}/` }, /points at this coordinator/],
      [
        { url: "https://example.com/", event_types: ["task.finished"] },
        /unknown event type pattern "task.finished"; valid patterns are \*, stub\.\*, deployment\.\*, task\.\*, sandbox\.\*, image\.\*, gpu\.\*, webhook\.\*, audit\.\*, stub\.deploy, /,
      ],
      [
        { url: "https://example.com/", event_types: ["log.*", "metrics.cpu"] },
        /unknown event type patterns "log\.\*", "metrics\.cpu"/,
      ],
      [{ url: "https://example.com/", event_types: ["task*"] }, /unknown event type pattern "task\*"/],
      [{ url: "https://example.com/", event_types: [{ a: 1 }] }, /event_types/],
      [{ url: "https://example.com/", description: "d".repeat(1001) }, /at most 1000/],
      [{ url: "https://example.com/", extra: 1 }, /additional properties/],
      [{ event_types: ["*"] }, /url/],
    ];
    for (const [payload, message] of bad) {
      const r = await call("POST", `/api/v1/webhook/${wsExt}`, payload);
      assert.equal(r.statusCode, 400, `${JSON.stringify(payload).slice(0, 80)}: ${r.body}`);
      assert.equal(r.json().error.code, "invalid_request");
      assert.match(r.json().error.message, message, JSON.stringify(payload).slice(0, 80));
      assert.ok(!r.body.includes("    at "), "no stack trace");
    }
    const unknown = await call("POST", `/api/v1/webhook/${wsExt}`, {
      url: "https://e.com/",
      event_types: ["nope"],
    });
    assert.deepEqual(unknown.json().error.details.valid, [...VALID_EVENT_PATTERNS]);
    for (const p of ["task.complete", "webhook.test", "deployment.scale"]) {
      assert.ok(unknown.json().error.message.includes(p), `the message lists ${p}`);
    }
    // Another port on loopback, or another host, is someone else's service.
    for (const url of [`http://127.0.0.1:${COORDINATOR_PORT + 1}/`, "http://berth.example.com/"]) {
      const r = await call("POST", `/api/v1/webhook/${wsExt}`, { url });
      assert.equal(r.statusCode, 201, `${url}: ${r.body}`);
      await call("DELETE", `/api/v1/webhook/${wsExt}/${r.json().id}`);
    }
    const ok = (await call("POST", `/api/v1/webhook/${wsExt}`, { url: "https://example.com/" })).json();
    const patch = await call("PATCH", `/api/v1/webhook/${wsExt}/${ok.id}`, {
      url: `http://localhost:${COORDINATOR_PORT}/`,
    });
    assert.equal(patch.statusCode, 400);
    assert.match(patch.json().error.message, /points at this coordinator/);
    const patch2 = await call("PATCH", `/api/v1/webhook/${wsExt}/${ok.id}`, {
      event_types: ["stub.*", "bogus"],
    });
    assert.equal(patch2.statusCode, 400);
    assert.match(patch2.json().error.message, /unknown event type pattern "bogus"/);
    const still = (await call("GET", `/api/v1/webhook/${wsExt}`))
      .json()
      .webhooks.find((w: { id: string }) => w.id === ok.id);
    assert.equal(still.url, "https://example.com/");
    assert.deepEqual(still.event_types, []);
    await call("DELETE", `/api/v1/webhook/${wsExt}/${ok.id}`);
  });

  test("a workspace holds at most 20 webhooks", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await call("POST", `/api/v1/webhook/${wsExt}`, { url: `https://example.com/${i}` });
      assert.equal(r.statusCode, 201, r.body);
      ids.push(r.json().id);
    }
    const over = await call("POST", `/api/v1/webhook/${wsExt}`, { url: "https://example.com/21" });
    assert.equal(over.statusCode, 429);
    assert.equal(over.json().error.code, "resource_exhausted");
    assert.match(over.json().error.message, /20 webhooks/);
    for (const id of ids) await call("DELETE", `/api/v1/webhook/${wsExt}/${id}`);
  });
});
