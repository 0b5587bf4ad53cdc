// The webhooks and webhook_deliveries tables on SQLite and PostgreSQL:
// workspace scoping, patches, the sealed secret never in listings, delivery
// records kept to a bound and gone with their webhook or workspace.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import type { WebhookDeliveryRecord } from "../../coordinator/webhooks/store.ts";
import { openSigningSecret, sealSigningSecret } from "../../coordinator/webhooks/validate.ts";
import { newId } from "../../shared/ids.ts";
import { ENGINES, randomKey } from "./helpers.ts";

for (const engine of ENGINES) {
  describe(`webhook records on ${engine.name}`, () => {
    let store: Store;
    let ws: string;
    let otherWs: string;
    const key = randomKey();
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };
    const at = (s: number) => new Date(Date.UTC(2030, 0, 1, 0, 0, s)).toISOString();

    const create = (workspaceId: string, url: string, eventTypes: string[] = [], s = 0) => {
      const id = newId("wh");
      return store.webhooks.create({
        id,
        workspaceId,
        url,
        eventTypes,
        description: `hook ${url}`,
        enabled: true,
        sealedSecret: sealSigningSecret(key, workspaceId, id, `whsec_secret-of-${id}`),
        at: at(s),
      });
    };
    const delivery = (
      webhookId: string,
      s: number,
      statusCode: number | null = 200,
    ): WebhookDeliveryRecord => ({
      id: `whd-${s}-${Math.random()}`,
      webhookId,
      eventId: newId("evt"),
      eventType: "task.complete",
      statusCode,
      error: statusCode === null ? "no response within 10000 ms" : null,
      durationMs: 12,
      attemptedAt: at(s),
    });

    before(async () => {
      store = await Store.open(await engine.url(suite));
      ws = (await store.workspaces.create("wh-main")).id;
      otherWs = (await store.workspaces.create("wh-other")).id;
    });
    after(async () => {
      await store?.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    test("create, get, list in order, count; another workspace sees none of it", async () => {
      const a = await create(ws, "https://a.example/hook", ["task.*"], 1);
      const b = await create(ws, "https://b.example/hook", [], 2);
      assert.match(a.id, /^wh-/);
      assert.deepEqual(await store.webhooks.get(ws, a.id), a);
      assert.deepEqual(a.eventTypes, ["task.*"]);
      assert.equal(a.enabled, true);
      assert.deepEqual(
        (await store.webhooks.list(ws)).map((w) => w.id),
        [a.id, b.id],
      );
      assert.equal(await store.webhooks.count(ws), 2);
      assert.equal(await store.webhooks.get(otherWs, a.id), undefined);
      assert.deepEqual(await store.webhooks.list(otherWs), []);
      assert.equal(await store.webhooks.update(otherWs, a.id, { enabled: false }, at(3)), undefined);
      assert.equal(await store.webhooks.delete(otherWs, a.id), false);
      assert.equal((await store.webhooks.get(ws, a.id))?.enabled, true);
    });

    test("the secret is stored sealed, opens with the key, and is absent from listings", async () => {
      const w = await create(ws, "https://sealed.example/");
      const secret = `whsec_secret-of-${w.id}`;
      const rows = await store.db.selectFrom("webhooks").selectAll().where("id", "=", w.id).execute();
      assert.ok(!JSON.stringify(rows).includes("secret-of"), "the secret is not stored in plain");
      const full = await store.webhooks.getWithSecret(ws, w.id);
      assert.ok(full);
      assert.equal(openSigningSecret(key, full), secret);
      assert.equal(openSigningSecret(randomKey(), full), undefined, "another key cannot open it");
      // Copied to another webhook's row, the seal does not open (bound to the id).
      assert.equal(openSigningSecret(key, { ...full, id: "wh-other" }), undefined);
      assert.ok(!("sealedSecret" in ((await store.webhooks.get(ws, w.id)) as object)));
      assert.ok(!(await store.webhooks.list(ws)).some((x) => "sealedSecret" in x));
      assert.equal(await store.webhooks.getWithSecret(otherWs, w.id), undefined);
    });

    test("update patches only the given fields; enabled lists only enabled ones", async () => {
      const w = await create(ws, "https://patch.example/", ["stub.deploy"]);
      const u = await store.webhooks.update(ws, w.id, { enabled: false }, at(9));
      assert.deepEqual(u, { ...w, enabled: false, updatedAt: at(9) });
      assert.ok(!(await store.webhooks.listEnabledWithSecrets()).some((x) => x.id === w.id));
      const v = await store.webhooks.update(
        ws,
        w.id,
        { url: "https://new.example/", eventTypes: ["*"], description: "d", enabled: true },
        at(10),
      );
      assert.deepEqual(v, {
        ...w,
        url: "https://new.example/",
        eventTypes: ["*"],
        description: "d",
        enabled: true,
        updatedAt: at(10),
      });
      const enabled = (await store.webhooks.listEnabledWithSecrets()).find((x) => x.id === w.id);
      assert.equal(enabled?.workspaceId, ws);
      assert.equal(enabled && openSigningSecret(key, enabled), `whsec_secret-of-${w.id}`);
    });

    test("deliveries: newest first, kept to a bound, gone with the webhook; none recorded for a deleted one", async () => {
      const w = await create(ws, "https://deliveries.example/");
      for (let s = 0; s < 7; s++)
        await store.webhooks.recordDelivery(delivery(w.id, s, s === 3 ? null : 200), 5);
      const list = await store.webhooks.deliveries(w.id, 50);
      assert.deepEqual(
        list.map((d) => d.attemptedAt),
        [6, 5, 4, 3, 2].map(at),
      );
      assert.equal(list[3]?.statusCode, null);
      assert.equal(list[3]?.error, "no response within 10000 ms");
      assert.equal(list[0]?.statusCode, 200);
      assert.equal(list[0]?.durationMs, 12);
      assert.equal((await store.webhooks.deliveries(w.id, 2)).length, 2);

      assert.equal(await store.webhooks.delete(ws, w.id), true);
      assert.equal(await store.webhooks.get(ws, w.id), undefined);
      assert.deepEqual(await store.webhooks.deliveries(w.id, 50), []);
      // An attempt finishing after the delete is dropped, not an error.
      await store.webhooks.recordDelivery(delivery(w.id, 8), 5);
      assert.deepEqual(await store.webhooks.deliveries(w.id, 50), []);
    });

    test("deleting a workspace removes its webhooks and their deliveries", async () => {
      const gone = (await store.workspaces.create("wh-gone")).id;
      const w = await create(gone, "https://gone.example/");
      await store.webhooks.recordDelivery(delivery(w.id, 1), 5);
      await store.db.deleteFrom("workspaces").where("id", "=", gone).execute();
      assert.equal(await store.webhooks.get(gone, w.id), undefined);
      assert.deepEqual(await store.webhooks.deliveries(w.id, 50), []);
    });
  });
}
