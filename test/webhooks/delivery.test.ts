// Deliveries to a real HTTP consumer: headers, a signature that verifies with
// the secret, a CloudEvents 1.0 body, filters, disabled and deleted webhooks,
// changes seen at once here and at the next reload elsewhere, timeouts that
// hold up nothing else, the bounded queue, and every attempt recorded.

import assert from "node:assert/strict";
import { createHmac, timingSafeEqual } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import { WebhookDispatcher } from "../../coordinator/webhooks/index.ts";
import { CLOUDEVENTS_CONTENT_TYPE } from "../../coordinator/events/types.ts";
import { tempDir } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";
import { MemoryFeed, event, startReceiver, webhookSystem } from "./helpers.ts";

/** What a consumer does (docs/webhooks.md): HMAC the raw body with the full secret, compare in constant time. */
function verifies(secret: string, rawBody: string, header: string | string[] | undefined): boolean {
  if (typeof header !== "string") return false;
  const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(rawBody).digest("hex")}`);
  const got = Buffer.from(header);
  return got.length === expected.length && timingSafeEqual(got, expected);
}

// Polls here wait as long as the test's own timeout allows, as they always have.
const UNBOUNDED = { timeoutMs: Number.POSITIVE_INFINITY, intervalMs: 20 };

describe("webhook deliveries", () => {
  let store: Store;
  let ws: { id: string; externalId: string };
  let otherWs: { id: string; externalId: string };
  const cleanups: (() => unknown)[] = [];
  const hooks = { after: (fn: () => unknown) => cleanups.push(fn) };

  before(async () => {
    store = await Store.open(`sqlite:${tempDir(hooks)}/b.db`);
    ws = await store.workspaces.create("deliver");
    otherWs = await store.workspaces.create("deliver-other");
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
    await store?.close();
  });

  /** A fresh workspace per test keeps each test's webhooks to itself. */
  const freshWorkspace = async (name: string) => store.workspaces.create(name);

  test("a delivery carries the CloudEvent, the headers and a signature that verifies with the secret", async () => {
    const rx = await startReceiver(hooks);
    const feed = new MemoryFeed();
    const { dispatcher, service } = webhookSystem(store);
    await dispatcher.start(feed);
    hooks.after(() => dispatcher.stop());
    const { webhook, signingSecret } = await service.create(ws.id, {
      url: rx.url("/hook"),
      event_types: ["task.*"],
    });
    assert.match(signingSecret, /^whsec_[A-Za-z0-9_-]{43}$/);

    const ev = event(ws, "task.complete", "task-abc");
    feed.publish(ev);
    await rx.waitFor(1);
    await dispatcher.idle();
    const [got] = rx.got;
    assert.ok(got);
    assert.equal(got.headers["content-type"], CLOUDEVENTS_CONTENT_TYPE);
    assert.equal(got.headers["x-service-event"], "task.complete");
    assert.equal(got.headers["x-service-delivery"], ev.id);
    assert.ok(verifies(signingSecret, got.body, got.headers["x-service-signature"]), "signature verifies");
    assert.ok(!verifies(`${signingSecret}x`, got.body, got.headers["x-service-signature"]));
    assert.ok(
      !verifies(signingSecret.slice("whsec_".length), got.body, got.headers["x-service-signature"]),
      "the signature uses the full secret, prefix included",
    );
    // node_modules has no `cloudevents` package; check the CloudEvents 1.0 structured-mode fields.
    const ce = JSON.parse(got.body);
    assert.deepEqual(ce, {
      specversion: "1.0",
      id: ev.id,
      source: `/workspaces/${ws.externalId}`,
      type: "task.complete",
      subject: "task-abc",
      time: ev.time,
      datacontenttype: "application/json",
      data: ev.data,
    });

    const [d] = await service.deliveries(ws.id, webhook.id);
    assert.equal(d?.eventId, ev.id);
    assert.equal(d?.eventType, "task.complete");
    assert.equal(d?.statusCode, 204);
    assert.equal(d?.error, null);
    assert.ok((d?.durationMs ?? -1) >= 0);
  });

  test("filters: exact, prefix.*, * and empty; disabled webhooks and other workspaces get nothing", async () => {
    const w = await freshWorkspace("filters");
    const rx = await startReceiver(hooks);
    const feed = new MemoryFeed();
    const { dispatcher, service } = webhookSystem(store);
    await dispatcher.start(feed);
    hooks.after(() => dispatcher.stop());
    const make = (path: string, event_types: string[]) =>
      service.create(w.id, { url: rx.url(path), event_types });
    await make("/exact", ["task.complete"]);
    await make("/prefix", ["task.*"]);
    await make("/star", ["*"]);
    await make("/empty", []);
    await make("/deploy", ["stub.deploy", "deployment.*"]);
    const off = await make("/disabled", ["*"]);
    await service.update(w.id, off.webhook.id, { enabled: false });
    await service.create(otherWs.id, { url: rx.url("/other-workspace"), event_types: ["*"] });

    feed.publish(event(w, "task.complete"));
    feed.publish(event(w, "task.failed"));
    feed.publish(event(w, "deployment.start"));
    // A test event on the feed is not fanned out: the test route addresses one webhook.
    feed.publish(event(w, "webhook.test"));
    await rx.waitFor(10);
    await dispatcher.idle();
    const byPath = (p: string) =>
      rx.got
        .filter((g) => g.path === p)
        .map((g) => g.headers["x-service-event"])
        .sort();
    assert.deepEqual(byPath("/exact"), ["task.complete"]);
    assert.deepEqual(byPath("/prefix"), ["task.complete", "task.failed"]);
    assert.deepEqual(byPath("/star"), ["deployment.start", "task.complete", "task.failed"]);
    assert.deepEqual(byPath("/empty"), ["deployment.start", "task.complete", "task.failed"]);
    assert.deepEqual(byPath("/deploy"), ["deployment.start"]);
    assert.deepEqual(byPath("/disabled"), []);
    assert.deepEqual(byPath("/other-workspace"), []);
    assert.equal(rx.got.length, 10);
  });

  test("update and delete apply at once on this coordinator, and at the next reload on another", async () => {
    const w = await freshWorkspace("changes");
    const rx = await startReceiver(hooks);
    const feedA = new MemoryFeed();
    const feedB = new MemoryFeed();
    const a = webhookSystem(store);
    // Coordinator B shares the store and the secrets key and reloads on its own interval.
    const log = (await import("pino")).default({ level: "silent" });
    const b = new WebhookDispatcher({ repo: store.webhooks, key: a.key, log, reloadIntervalMs: 50 });
    await a.dispatcher.start(feedA);
    await b.start(feedB);
    hooks.after(() => a.dispatcher.stop());
    hooks.after(() => b.stop());

    const { webhook } = await a.service.create(w.id, { url: rx.url("/a"), event_types: ["*"] });
    feedA.publish(event(w, "task.created"));
    await rx.waitFor(1);
    // B learns of the new webhook by its periodic reload.
    const n = rx.got.length;
    await waitUntil(
      async () => {
        feedB.publish(event(w, "task.created", "from-b"));
        await b.idle();
        return rx.got.length > n ? true : undefined;
      },
      { what: "B's delivery of the reloaded webhook", ...UNBOUNDED },
    );

    await a.service.update(w.id, webhook.id, { url: rx.url("/moved"), event_types: ["task.failed"] });
    feedA.publish(event(w, "task.created"));
    feedA.publish(event(w, "task.failed"));
    await a.dispatcher.idle();
    assert.deepEqual(
      rx.got.filter((g) => g.path === "/moved").map((g) => g.headers["x-service-event"]),
      ["task.failed"],
    );

    await a.service.delete(w.id, webhook.id);
    const before = rx.got.length;
    feedA.publish(event(w, "task.failed"));
    await a.dispatcher.idle();
    assert.equal(rx.got.length, before, "a deleted webhook gets nothing here at once");
    await b.reload();
    feedB.publish(event(w, "task.failed"));
    await b.idle();
    assert.equal(rx.got.length, before, "nor on the other coordinator after its reload");
  });

  test("a consumer that never answers holds up no other delivery and ends at the timeout", async () => {
    const w = await freshWorkspace("hang");
    const hang = await startReceiver(hooks);
    const ok = await startReceiver(hooks);
    const feed = new MemoryFeed();
    const { dispatcher, service } = webhookSystem(store, { timeoutMs: 300 });
    await dispatcher.start(feed);
    hooks.after(() => dispatcher.stop());
    const slow = await service.create(w.id, { url: hang.url("/hang"), event_types: ["*"] });
    const fast = await service.create(w.id, { url: ok.url("/ok"), event_types: ["*"] });

    const ev = event(w, "task.running");
    feed.publish(ev);
    await dispatcher.idle();
    assert.equal(hang.got.length, 1, "the hanging consumer received the request");
    const [timedOut] = await service.deliveries(w.id, slow.webhook.id);
    assert.equal(timedOut?.statusCode, null);
    assert.equal(timedOut?.error, "no response within 300 ms");
    assert.equal(timedOut?.eventId, ev.id);
    const [delivered] = await service.deliveries(w.id, fast.webhook.id);
    assert.equal(delivered?.statusCode, 204);
  });

  test("while a consumer hangs, other deliveries complete and are recorded", {
    timeout: 30_000,
  }, async () => {
    const w = await freshWorkspace("hang-long");
    const hangHooks: (() => unknown)[] = [];
    const hang = await startReceiver({ after: (fn) => hangHooks.push(fn) });
    const ok = await startReceiver(hooks);
    const feed = new MemoryFeed();
    // A timeout far beyond this test's own: if the hanging delivery held up
    // the other one, this test would fail on its timeout.
    const { dispatcher, service } = webhookSystem(store, { timeoutMs: 600_000 });
    await dispatcher.start(feed);
    hooks.after(() => dispatcher.stop());
    const slow = await service.create(w.id, { url: hang.url("/hang"), event_types: ["*"] });
    const fast = await service.create(w.id, { url: ok.url("/ok"), event_types: ["*"] });

    feed.publish(event(w, "task.running"));
    const recorded = await waitUntil(async () => (await service.deliveries(w.id, fast.webhook.id))[0], {
      what: "the fast webhook's delivery record",
      ...UNBOUNDED,
    });
    assert.equal(recorded.statusCode, 204);
    await hang.waitFor(1);
    assert.deepEqual(await service.deliveries(w.id, slow.webhook.id), [], "the hanging one is still open");
    // The consumer drops the connection: the attempt ends with the socket error.
    for (const fn of hangHooks) await fn();
    await dispatcher.idle();
    const [dropped] = await service.deliveries(w.id, slow.webhook.id);
    assert.equal(dropped?.statusCode, null);
    assert.ok(dropped?.error, "the error is recorded");
  });

  test("beyond the in-flight bound deliveries queue; beyond the queue bound they are dropped with a warning", async () => {
    const w = await freshWorkspace("queue");
    const hang = await startReceiver(hooks);
    const feed = new MemoryFeed();
    const { dispatcher, service, lines } = webhookSystem(store, {
      timeoutMs: 300,
      maxInFlight: 1,
      maxQueued: 1,
    });
    await dispatcher.start(feed);
    hooks.after(() => dispatcher.stop());
    const { webhook } = await service.create(w.id, { url: hang.url("/hang"), event_types: ["*"] });
    const events = [event(w, "task.created"), event(w, "task.running"), event(w, "task.complete")];
    for (const ev of events) feed.publish(ev);
    await dispatcher.idle();
    const recorded = await service.deliveries(w.id, webhook.id);
    assert.deepEqual(recorded.map((d) => d.eventId).sort(), [events[0]?.id, events[1]?.id].sort());
    const warning = lines.find((l) => /queue full/.test(String(l.msg)));
    assert.equal(warning?.event, events[2]?.id);
  });

  test("error statuses and unreachable consumers are recorded as such", async () => {
    const w = await freshWorkspace("errors");
    const rx = await startReceiver(hooks);
    const feed = new MemoryFeed();
    const { dispatcher, service } = webhookSystem(store);
    await dispatcher.start(feed);
    hooks.after(() => dispatcher.stop());
    const failing = await service.create(w.id, { url: rx.url("/status/500"), event_types: ["*"] });
    const redirect = await service.create(w.id, { url: rx.url("/status/302"), event_types: ["*"] });
    // A port nothing listens on: a receiver's, once closed.
    const closer: (() => unknown)[] = [];
    const closed = await startReceiver({ after: (fn) => closer.push(fn) });
    const refusedUrl = closed.url("/");
    for (const fn of closer) await fn();
    const refused = await service.create(w.id, { url: refusedUrl, event_types: ["*"] });

    feed.publish(event(w, "task.failed"));
    await dispatcher.idle();
    assert.equal((await service.deliveries(w.id, failing.webhook.id))[0]?.statusCode, 500);
    assert.equal(
      (await service.deliveries(w.id, redirect.webhook.id))[0]?.statusCode,
      302,
      "redirects are not followed",
    );
    const [r] = await service.deliveries(w.id, refused.webhook.id);
    assert.equal(r?.statusCode, null);
    assert.match(r?.error ?? "", /ECONNREFUSED/);
  });

  test("test() sends webhook.test to that webhook only, enabled or not, and answers the outcome", async () => {
    const w = await freshWorkspace("testing");
    const rx = await startReceiver(hooks);
    const feed = new MemoryFeed();
    const { dispatcher, service } = webhookSystem(store);
    await dispatcher.start(feed);
    hooks.after(() => dispatcher.stop());
    const target = await service.create(w.id, { url: rx.url("/target"), event_types: ["task.*"] });
    await service.create(w.id, { url: rx.url("/bystander"), event_types: ["*"] });
    await service.update(w.id, target.webhook.id, { enabled: false });

    const outcome = await service.test(w.id, target.webhook.id);
    assert.equal(outcome.statusCode, 204);
    assert.equal(outcome.eventType, "webhook.test");
    await dispatcher.idle();
    assert.deepEqual(
      rx.got.map((g) => g.path),
      ["/target"],
    );
    const [got] = rx.got;
    assert.ok(got && verifies(target.signingSecret, got.body, got.headers["x-service-signature"]));
    const ce = JSON.parse(got?.body ?? "{}");
    assert.equal(ce.type, "webhook.test");
    assert.equal(ce.id, outcome.eventId);
    assert.equal(ce.subject, target.webhook.id);
    assert.deepEqual(
      (await service.deliveries(w.id, target.webhook.id)).map((d) => d.id),
      [outcome.id],
    );
    await assert.rejects(service.test(otherWs.id, target.webhook.id), { code: "not_found" });
  });
});
