// Batching in the event stream over a real nats-server: the events one
// workspace emits together are one stored message, and every reader expands
// them — history cursors inside a batch, type filters over mixed batches,
// follow resuming from an event in the middle of a batch, the live feed and
// the local feed, messages stored one event each (before batching), batches
// split by size, and lost events counted.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { connect } from "nats";
import pino from "pino";
import { EVENTS_STREAM, EventStream } from "../../coordinator/events/index.ts";
import type { BerthEvent, EventType } from "../../coordinator/events/types.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { perSuite } from "../helpers/suite.ts";
import { waitUntil } from "../helpers/wait.ts";
import { startEventHarness } from "./helpers.ts";

describe("event batches", () => {
  const h = perSuite((suite) => startEventHarness(suite));

  const publish = (
    s: EventStream,
    ws: Workspace,
    type: EventType,
    n: number,
    data: Record<string, unknown> = {},
  ) =>
    s.publish({
      type,
      workspaceId: ws.id,
      workspaceExternalId: ws.externalId,
      subject: `s-${n}`,
      data: { n, ...data },
    });
  const storedMessages = async () =>
    (await (await h.nc.jetstreamManager()).streams.info(EVENTS_STREAM)).state.messages;

  test("events of one turn are one message per workspace, in order", async () => {
    const a = await h.store.workspaces.create("batch-a");
    const b = await h.store.workspaces.create("batch-b");
    const before = h.stream.stats();
    const messagesBefore = await storedMessages();
    for (let i = 0; i < 5; i++) {
      publish(h.stream, a, "task.created", i);
      publish(h.stream, b, "task.created", i);
    }
    await h.stream.flush();
    const now = h.stream.stats();
    assert.equal(now.stored - before.stored, 10);
    assert.equal(now.messages - before.messages, 2, "one message for each workspace");
    assert.equal((await storedMessages()) - messagesBefore, 2);
    for (const ws of [a, b]) {
      const page = await h.stream.history(ws.id);
      assert.deepEqual(
        page.events.map((e) => e.data.n),
        [0, 1, 2, 3, 4],
      );
      assert.ok(page.events.every((e) => e.workspaceId === ws.id));
    }
  });

  test("history pages by cursors that point inside a batch, and filters types of a mixed batch", async () => {
    const ws = await h.store.workspaces.create("batch-paging");
    const types: EventType[] = ["task.created", "task.running", "task.complete"];
    for (let i = 0; i < 7; i++) publish(h.stream, ws, types[i % 3] as EventType, i);
    await h.stream.flush();

    const seen: number[] = [];
    const cursors: string[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await h.stream.history(ws.id, { limit: 3, ...(cursor ? { cursor } : {}) });
      seen.push(...page.events.map((e) => e.data.n as number));
      if (!page.next_cursor) break;
      cursors.push(page.next_cursor);
      cursor = page.next_cursor;
    }
    assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6]);
    assert.equal(cursors.length, 2);
    const [first, second] = cursors.map((c) => /^(\d+):(\d+)$/.exec(c)) as RegExpExecArray[];
    assert.ok(first && second, `cursors look like {seq}:{index}: ${cursors.join(", ")}`);
    assert.equal(first[1], second[1], "both point into the same stored message");
    assert.deepEqual([first[2], second[2]], ["2", "5"]);

    const running = await h.stream.history(ws.id, { type: "task.running" });
    assert.deepEqual(
      running.events.map((e) => e.data.n),
      [1, 4],
    );
    const two = await h.stream.history(ws.id, { type: "task.created,task.complete", limit: 2 });
    assert.deepEqual(
      two.events.map((e) => e.data.n),
      [0, 2],
    );
    assert.ok(two.next_cursor);
    const rest = await h.stream.history(ws.id, {
      type: "task.created,task.complete",
      cursor: two.next_cursor,
    });
    assert.deepEqual(
      rest.events.map((e) => e.data.n),
      [3, 5, 6],
    );
    assert.equal(rest.next_cursor, null);
  });

  test("follow resumes after an event in the middle of a batch, then goes on live", async () => {
    const ws = await h.store.workspaces.create("batch-follow");
    for (let i = 0; i < 4; i++) publish(h.stream, ws, "stub.deploy", i);
    await h.stream.flush();
    const evs = (await h.stream.history(ws.id)).events;
    const second = evs[1] as BerthEvent;
    const next = async (it: AsyncIterator<BerthEvent>) => ((await it.next()).value as BerthEvent).data.n;
    // h.stream remembers where its own events went.
    const own = await h.stream.follow(ws.id, { fromId: second.id });
    const ownIt = own[Symbol.asyncIterator]();
    assert.deepEqual([await next(ownIt), await next(ownIt)], [2, 3]);
    publish(h.stream, ws, "deployment.stop", 10);
    publish(h.stream, ws, "deployment.start", 11);
    assert.deepEqual([await next(ownIt), await next(ownIt)], [10, 11]);
    own.close();
    // A fresh stream knows no ids: it finds the event by scanning, then replays the rest.
    const fresh = await (await h.secondStream()).follow(ws.id, { fromId: second.id });
    const freshIt = fresh[Symbol.asyncIterator]();
    assert.deepEqual(
      [await next(freshIt), await next(freshIt), await next(freshIt), await next(freshIt)],
      [2, 3, 10, 11],
    );
    publish(h.stream, ws, "deployment.stop", 20);
    assert.equal(await next(freshIt), 20);
    fresh.close();
    // The last event of a batch resumes at the next batch.
    const last = evs[3] as BerthEvent;
    const feed = await (await h.secondStream()).follow(ws.id, { fromId: last.id });
    const it = feed[Symbol.asyncIterator]();
    assert.equal(((await it.next()).value as BerthEvent).data.n, 10);
    feed.close();
  });

  test("the live feed and the local feed hand out each event of a batch, in order", async () => {
    const ws = await h.store.workspaces.create("batch-live");
    const live = await h.collect();
    const local: BerthEvent[] = [];
    const stopLocal = h.stream.localFeed.subscribe((ev) => local.push(ev));
    try {
      for (let i = 0; i < 6; i++) publish(h.stream, ws, "task.complete", i);
      await h.stream.flush();
      const mine = () => live.events.filter((e) => e.workspaceId === ws.id);
      await waitUntil(() => mine().length >= 6, { what: "six live events" });
      assert.deepEqual(
        mine().map((e) => e.data.n),
        [0, 1, 2, 3, 4, 5],
      );
      assert.deepEqual(
        local.filter((e) => e.workspaceId === ws.id).map((e) => e.data.n),
        [0, 1, 2, 3, 4, 5],
      );
    } finally {
      live.stop();
      stopLocal();
    }
  });

  test("a message stored as one event (before batching) reads as a batch of one", async () => {
    const ws = await h.store.workspaces.create("batch-legacy");
    const old: BerthEvent = {
      id: "evt-legacy0001",
      type: "stub.deploy",
      workspaceId: ws.id,
      workspaceExternalId: ws.externalId,
      subject: "old",
      time: new Date().toISOString(),
      data: { n: 0 },
    };
    await h.nc
      .jetstream()
      .publish(`berth.events.${ws.id}.evt.stub.deploy`, new TextEncoder().encode(JSON.stringify(old)));
    publish(h.stream, ws, "stub.deploy", 1);
    publish(h.stream, ws, "stub.deploy", 2);
    await h.stream.flush();
    const page = await h.stream.history(ws.id, { limit: 1 });
    assert.deepEqual(
      page.events.map((e) => e.id),
      [old.id],
    );
    // A bare sequence (a cursor from before batching) resumes after that whole message.
    const seq = (page.next_cursor as string).split(":")[0] as string;
    const rest = await h.stream.history(ws.id, { cursor: seq });
    assert.deepEqual(
      rest.events.map((e) => e.data.n),
      [1, 2],
    );
    const feed = await (await h.secondStream()).follow(ws.id, { fromId: old.id });
    const it = feed[Symbol.asyncIterator]();
    assert.equal(((await it.next()).value as BerthEvent).data.n, 1);
    feed.close();
  });

  test("a batch too big for one message is split, keeping order", async () => {
    const ws = await h.store.workspaces.create("batch-big");
    const before = h.stream.stats();
    const blob = "x".repeat(100 * 1024);
    for (let i = 0; i < 6; i++) publish(h.stream, ws, "task.failed", i, { blob });
    await h.stream.flush();
    const now = h.stream.stats();
    assert.equal(now.stored - before.stored, 6);
    assert.ok(
      now.messages - before.messages >= 3,
      `6 events of 100 KiB took ${now.messages - before.messages} messages`,
    );
    const page = await h.stream.history(ws.id);
    assert.deepEqual(
      page.events.map((e) => e.data.n),
      [0, 1, 2, 3, 4, 5],
    );
  });

  test("with batchWindowMs 0, events of separate turns are separate messages", async () => {
    const ws = await h.store.workspaces.create("batch-turns");
    const s = new EventStream({ nats: h.nc, log: pino({ level: "silent" }), batchWindowMs: 0 });
    publish(s, ws, "stub.deploy", 0);
    publish(s, ws, "stub.deploy", 1);
    await new Promise((r) => setTimeout(r, 20));
    publish(s, ws, "stub.deploy", 2);
    await s.flush();
    assert.deepEqual(s.stats(), { stored: 3, messages: 2, lost: 0 });
    assert.throws(
      () => new EventStream({ nats: h.nc, log: pino({ level: "silent" }), batchWindowMs: -1 }),
      /batchWindowMs/,
    );
  });

  test("events that cannot be stored are counted as lost and logged once with the count", async () => {
    const lines: string[] = [];
    const log = pino({ level: "warn" }, { write: (s: string) => lines.push(s) });
    const nc = await connect({
      servers: h.nats.url,
      user: h.nats.coordinator.user,
      pass: h.nats.coordinator.password,
    });
    const s = new EventStream({ nats: nc, log });
    await nc.close();
    for (let i = 0; i < 3; i++) publish(s, h.ws, "stub.deploy", i);
    await s.flush();
    assert.deepEqual(s.stats(), { stored: 0, messages: 0, lost: 3 });
    const warned = lines.filter((l) => /cannot store events/.test(l));
    assert.equal(warned.length, 1);
    assert.equal(JSON.parse(warned[0] as string).failed, 3);
  });
});
