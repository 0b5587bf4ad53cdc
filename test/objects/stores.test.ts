// Queue, Map and Signal stores against a real nats-server with JetStream.

import assert from "node:assert/strict";
import { test } from "node:test";
import { isBerthError } from "../../shared/errors.ts";
import { MapStore } from "../../coordinator/state/maps.ts";
import { QueueStore } from "../../coordinator/state/queues.ts";
import { SignalStore } from "../../coordinator/state/signals.ts";
import { StateObjects } from "../../coordinator/state/state.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

test("queue, map and signal stores on JetStream", async (t) => {
  const nats = await startTestNats(t);
  const nc = await connectTestNats(t, nats, "coordinator");
  let maxItems: number | null = null;
  const queues = new QueueStore({ nc, limits: { maxItemBytes: 64 }, maxItems: async () => maxItems });
  const maps = new MapStore(nc, { maxValueBytes: 64 });

  await t.test("a queue is FIFO, pop on empty is undefined, size and list count items", async () => {
    assert.equal(await queues.pop("ws-a", "jobs"), undefined);
    for (const s of ["1", "2", "3"]) await queues.put("ws-a", "jobs", bytes(s));
    await queues.put("ws-a", "other", bytes("x"));
    assert.equal(await queues.size("ws-a", "jobs"), 3);
    assert.deepEqual(await queues.list("ws-a"), [
      { name: "jobs", size: 3 },
      { name: "other", size: 1 },
    ]);
    assert.equal(text(await queues.pop("ws-a", "jobs")), "1");
    assert.equal(text(await queues.pop("ws-a", "jobs")), "2");
    assert.equal(await queues.size("ws-a", "jobs"), 1);
    assert.equal(await queues.items("ws-a"), 2);
  });

  await t.test("another workspace sees none of it", async () => {
    assert.equal(await queues.pop("ws-b", "jobs"), undefined);
    assert.deepEqual(await queues.list("ws-b"), []);
    await assert.rejects(queues.delete("ws-b", "jobs"), (e) => isBerthError(e) && e.code === "not_found");
  });

  await t.test("concurrent poppers each get distinct items, none lost", async () => {
    const n = 200;
    await Promise.all(Array.from({ length: n }, (_, i) => queues.put("ws-a", "race", bytes(String(i)))));
    const got: string[] = [];
    const popper = async () => {
      for (;;) {
        const v = await queues.pop("ws-a", "race");
        if (v === undefined) return;
        got.push(text(v) as string);
      }
    };
    await Promise.all([popper(), popper(), popper(), popper()]);
    assert.equal(got.length, n);
    assert.equal(new Set(got).size, n);
  });

  await t.test("limits: item size, workspace item quota, bad names", async () => {
    await assert.rejects(
      queues.put("ws-a", "jobs", new Uint8Array(65)),
      (e) => isBerthError(e) && e.code === "resource_exhausted" && /64-byte item limit/.test(e.message),
    );
    maxItems = 3;
    await queues.limitsChanged("ws-a");
    assert.equal(await queues.items("ws-a"), 2);
    await queues.put("ws-a", "jobs", bytes("a"));
    await assert.rejects(
      queues.put("ws-a", "jobs", bytes("b")),
      (e) => isBerthError(e) && e.code === "limit_exceeded" && /limit of 3 items/.test(e.message),
    );
    maxItems = null;
    await queues.limitsChanged("ws-a");
    await queues.put("ws-a", "jobs", bytes("b"));
    // A quota lowered below what the queues hold drops nothing; puts wait until pops make room.
    assert.equal(await queues.items("ws-a"), 4);
    maxItems = 2;
    await queues.limitsChanged("ws-a");
    assert.equal(await queues.items("ws-a"), 4, "no item dropped");
    await assert.rejects(
      queues.put("ws-a", "jobs", bytes("c")),
      (e) => isBerthError(e) && e.code === "limit_exceeded" && /limit of 2 items/.test(e.message),
    );
    assert.equal(text(await queues.pop("ws-a", "other")), "x");
    maxItems = 4;
    await queues.limitsChanged("ws-a");
    await queues.put("ws-a", "other", bytes("y"));
    maxItems = null;
    await queues.limitsChanged("ws-a");
    assert.equal(text(await queues.pop("ws-a", "other")), "y");
    for (const bad of ["", "a.b", "a b", "-x", "x".repeat(64), "*"])
      await assert.rejects(
        queues.put("ws-a", bad, bytes("1")),
        (e) => isBerthError(e) && e.code === "invalid_request",
      );
    assert.equal(await queues.delete("ws-a", "jobs"), 3);
    assert.equal(await queues.items("ws-a"), 0);
    assert.equal(await queues.size("ws-a", "jobs"), 0);
  });

  await t.test("a map keeps any string key, deletes, lists and counts", async () => {
    const keys = ["a", "", "with.dot", "ключ", "*>/ spaces"];
    for (const [i, k] of keys.entries()) await maps.set("ws-a", "seen", k, bytes(String(i)));
    assert.equal(text(await maps.get("ws-a", "seen", "ключ")), "3");
    assert.equal(await maps.get("ws-a", "seen", "missing"), undefined);
    assert.deepEqual(await maps.keys("ws-a", "seen"), [...keys].sort());
    assert.equal(await maps.delete("ws-a", "seen", "a"), true);
    assert.equal(await maps.delete("ws-a", "seen", "a"), false);
    assert.equal(await maps.size("ws-a", "seen"), 4);
    const items = await maps.items("ws-a", "seen");
    assert.deepEqual(
      items.map(([k, v]) => [k, text(v)]),
      [
        ["", "1"],
        ["*>/ spaces", "4"],
        ["with.dot", "2"],
        ["ключ", "3"],
      ],
    );
    assert.deepEqual(await maps.items("ws-a", "empty"), []);
    // map.items pages: 10-byte pages hold one of these entries each, in key order.
    const state = new StateObjects(queues, maps, new SignalStore(nc), { itemsPageBytes: 10 });
    const pages: unknown[] = [];
    let after: string | undefined;
    for (;;) {
      const page = (await state.call("ws-a", {
        op: "map.items",
        name: "seen",
        ...(after === undefined ? {} : { after }),
      })) as {
        items: [string, string][];
        next: string | null;
      };
      pages.push(page.items.map(([k]) => k));
      if (page.next === null) break;
      after = page.next;
    }
    assert.deepEqual(pages, [[""], ["*>/ spaces"], ["with.dot"], ["ключ"]]);
    assert.deepEqual(await maps.list("ws-a"), [{ name: "seen", size: 4 }]);
    assert.equal(await maps.get("ws-b", "seen", "ключ"), undefined);
    await assert.rejects(
      maps.set("ws-a", "seen", "big", new Uint8Array(65)),
      (e) => isBerthError(e) && e.code === "resource_exhausted",
    );
    assert.equal(await maps.deleteMap("ws-a", "seen"), 4);
    assert.deepEqual(await maps.list("ws-a"), []);
  });

  await t.test("a signal wait answers at once for a newer revision and wakes on set", async () => {
    const signals = new SignalStore(nc);
    await signals.start();
    t.after(() => signals.stop());
    assert.equal((await signals.state("ws-a", "reload")).set, false);
    assert.deepEqual(await signals.wait("ws-a", ["reload"], {}, 0), []);
    const waiting = signals.wait("ws-a", ["reload"], {}, 30_000);
    const s = await signals.set("ws-a", "reload", 60);
    const fired = await waiting;
    assert.equal(fired.length, 1);
    assert.equal(fired[0]?.revision, s.revision);
    // Seen: no answer until the next set.
    assert.deepEqual(await signals.wait("ws-a", ["reload"], { reload: s.revision }, 0), []);
    assert.deepEqual(await signals.wait("ws-b", ["reload"], {}, 0), []);
    assert.deepEqual(
      (await signals.list("ws-a")).map((x) => x.name),
      ["reload"],
    );
    assert.equal(await signals.clear("ws-a", "reload"), true);
    assert.equal((await signals.state("ws-a", "reload")).set, false);
    assert.equal(await signals.clear("ws-a", "reload"), false);
    await assert.rejects(
      signals.set("ws-a", "reload", 0),
      (e) => isBerthError(e) && e.code === "invalid_request",
    );
  });
});
