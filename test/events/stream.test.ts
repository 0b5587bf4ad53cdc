// The workspace event stream over a real nats-server: task events emitted by a
// real TaskService, history paging and filters, workspace isolation, other
// coordinators' events, follow/resume, and publishing with NATS gone.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { connect } from "nats";
import pino from "pino";
import { EventStream, WorkspaceEvents } from "../../coordinator/events/index.ts";
import type { BerthEvent, EventType } from "../../coordinator/events/types.ts";
import type { BerthError } from "../../shared/errors.ts";
import { perSuite } from "../helpers/suite.ts";
import { waitUntil } from "../helpers/wait.ts";
import { startEventHarness } from "./helpers.ts";

describe("event stream", () => {
  const h = perSuite((suite) => startEventHarness(suite));

  const publish = (workspaceId: string, ext: string, type: EventType, subject: string, n = 0) =>
    h.stream.publish({ type, workspaceId, workspaceExternalId: ext, subject, data: { n } });

  test("a submitted task that completes emits created → running → complete in order, with its data", async () => {
    const live = await h.collect();
    try {
      const [id] = await h.tasks.submit(h.ws.id, h.stubId, [new Uint8Array([1])]);
      assert.ok(id);
      await h.agentEvent({ type: "started", taskId: id, containerId: "ctr-a" });
      await h.agentEvent({
        type: "finished",
        taskId: id,
        containerId: "ctr-a",
        status: "COMPLETE",
        resultJson: "4",
      });
      const mine = () => live.events.filter((e) => e.subject === id);
      await waitUntil(() => mine().length >= 3, { what: "the task's three events" });
      const evs = mine();
      assert.deepEqual(
        evs.map((e) => e.type),
        ["task.created", "task.running", "task.complete"],
      );
      for (const e of evs) {
        assert.equal(e.workspaceId, h.ws.id);
        assert.equal(e.workspaceExternalId, h.ws.externalId);
        assert.match(e.id, /^evt-/);
        assert.equal(e.data.task_id, id);
        assert.equal(e.data.stub_id, h.stubId);
      }
      const [created, running, complete] = evs as [BerthEvent, BerthEvent, BerthEvent];
      assert.equal(created.data.status, "PENDING");
      assert.equal(created.data.started_at, null);
      assert.equal(running.data.status, "RUNNING");
      assert.equal(running.data.container_id, "ctr-a");
      assert.equal(running.data.attempt, 1);
      assert.equal(typeof running.data.started_at, "string");
      assert.equal(complete.data.status, "COMPLETE");
      assert.equal(typeof complete.data.ended_at, "string");
      assert.equal(complete.data.error, undefined);

      // The same events, in the same order, are in the history.
      const page = await h.stream.history(h.ws.id, { type: "task.*" });
      assert.deepEqual(
        page.events.filter((e) => e.subject === id).map((e) => e.id),
        evs.map((e) => e.id),
      );
    } finally {
      live.stop();
    }
  });

  test("a cancelled task emits task.cancelled with its error", async () => {
    const live = await h.collect();
    try {
      const [id] = await h.tasks.submit(h.ws.id, h.stubId, [new Uint8Array([2])]);
      assert.ok(id);
      await h.tasks.cancel(h.ws.id, id);
      await waitUntil(() => live.events.some((e) => e.subject === id && e.type === "task.cancelled"), {
        what: "task.cancelled",
      });
      const ev = live.events.find((e) => e.type === "task.cancelled" && e.subject === id);
      assert.ok(ev);
      assert.equal(ev.data.status, "CANCELLED");
      assert.equal((ev.data.error as { type: string }).type, "TaskCancelled");
    } finally {
      live.stop();
    }
  });

  test("history pages by cursor, oldest first, filters by type and time; another workspace's never appear", async () => {
    const ws = await h.store.workspaces.create("paging");
    const other = await h.store.workspaces.create("paging-other");
    // `after` and `before` are exclusive: t0 is a millisecond before the first event.
    const t0 = new Date(Date.now() - 1).toISOString();
    for (let i = 0; i < 7; i++) {
      publish(ws.id, ws.externalId, i % 2 ? "deployment.start" : "stub.deploy", `dep-${i}`, i);
      publish(other.id, other.externalId, "stub.deploy", `other-${i}`, i);
    }
    await h.stream.flush();

    const seen: BerthEvent[] = [];
    let cursor: string | undefined;
    let pages = 0;
    for (;;) {
      const page = await h.stream.history(ws.id, { limit: 3, ...(cursor ? { cursor } : {}) });
      pages++;
      seen.push(...page.events);
      if (!page.next_cursor) break;
      cursor = page.next_cursor;
    }
    assert.equal(pages, 3);
    assert.deepEqual(
      seen.map((e) => e.data.n),
      [0, 1, 2, 3, 4, 5, 6],
    );
    assert.ok(seen.every((e) => e.workspaceId === ws.id));

    const starts = await h.stream.history(ws.id, { type: "deployment.start" });
    assert.deepEqual(
      starts.events.map((e) => e.data.n),
      [1, 3, 5],
    );
    const both = await h.stream.history(ws.id, { type: "deployment.*,stub.deploy", limit: 2 });
    assert.deepEqual(
      both.events.map((e) => e.data.n),
      [0, 1],
    );
    assert.ok(both.next_cursor);

    assert.equal((await h.stream.history(ws.id, { after: t0 })).events.length, 7);
    assert.equal((await h.stream.history(ws.id, { before: t0 })).events.length, 0);
    const future = new Date(Date.now() + 60_000).toISOString();
    assert.equal((await h.stream.history(ws.id, { after: future })).events.length, 0);
    assert.equal((await h.stream.history(ws.id, { before: future })).events.length, 7);
    const empty = await h.stream.history((await h.store.workspaces.create("none")).id);
    assert.deepEqual(empty, { events: [], next_cursor: null });
  });

  test("history refuses bad input, naming it", async () => {
    await assert.rejects(h.stream.history(h.ws.id, { type: "task.nope" }), (e: BerthError) => {
      assert.equal(e.code, "invalid_request");
      assert.match(e.message, /task\.nope/);
      assert.match(e.message, /task\.complete/);
      return true;
    });
    await assert.rejects(h.stream.history(h.ws.id, { limit: 1001 }), /limit/);
    await assert.rejects(h.stream.history(h.ws.id, { after: "yesterday" }), /after "yesterday"/);
    await assert.rejects(h.stream.history(h.ws.id, { cursor: "abc" }), /cursor/);
  });

  test("events stored by another coordinator reach this one's subscribers", async () => {
    const live = await h.collect();
    try {
      const second = await h.secondStream();
      second.publish({
        type: "deployment.stop",
        workspaceId: h.ws.id,
        workspaceExternalId: h.ws.externalId,
        subject: "dep-from-afar",
        data: {},
      });
      await waitUntil(() => live.events.some((e) => e.subject === "dep-from-afar"), {
        what: "the other coordinator's event",
      });
    } finally {
      live.stop();
    }
  });

  test("follow resumes after an event id, then goes on live; an unknown id is invalid_request", async () => {
    const ws = await h.store.workspaces.create("follow");
    for (let i = 0; i < 3; i++) publish(ws.id, ws.externalId, "stub.deploy", `f-${i}`, i);
    await h.stream.flush();
    const [first] = (await h.stream.history(ws.id)).events;
    assert.ok(first);
    // A fresh stream knows no ids: the id is found in the stream itself.
    const fresh = await h.secondStream();
    const feed = await fresh.follow(ws.id, { fromId: first.id });
    const it = feed[Symbol.asyncIterator]();
    assert.equal(((await it.next()).value as BerthEvent).data.n, 1);
    assert.equal(((await it.next()).value as BerthEvent).data.n, 2);
    publish(ws.id, ws.externalId, "deployment.delete", "f-live", 3);
    assert.equal(((await it.next()).value as BerthEvent).subject, "f-live");
    feed.close();

    await assert.rejects(fresh.follow(ws.id, { fromId: "evt-unknown0000" }), (e: BerthError) => {
      assert.equal(e.code, "invalid_request");
      return true;
    });
    // Another workspace's event id is unknown here.
    await assert.rejects(fresh.follow(h.ws.id, { fromId: first.id }), /unknown event id/);
  });

  test("the emitter fills in the workspace's external id and keeps order while it looks it up", async () => {
    const ws = await h.store.workspaces.create("emitter");
    const emitter = new WorkspaceEvents(h.stream, h.store.workspaces, pino({ level: "silent" }));
    for (let i = 0; i < 4; i++) emitter.emit(ws.id, "stub.deploy", `e-${i}`, { n: i });
    await waitUntil(
      async () => {
        await h.stream.flush();
        return (await h.stream.history(ws.id)).events.length === 4;
      },
      { what: "all four stored" },
    );
    const evs = (await h.stream.history(ws.id)).events;
    assert.deepEqual(
      evs.map((e) => e.data.n),
      [0, 1, 2, 3],
    );
    assert.ok(evs.every((e) => e.workspaceExternalId === ws.externalId));
  });

  test("publish never throws when NATS is gone, and logs that events are lost", async () => {
    const lines: string[] = [];
    const log = pino({ level: "warn" }, { write: (s: string) => lines.push(s) });
    const nc = await connect({
      servers: h.nats.url,
      user: h.nats.coordinator.user,
      pass: h.nats.coordinator.password,
    });
    const s = new EventStream({ nats: nc, log });
    await nc.close();
    assert.doesNotThrow(() =>
      s.publish({
        type: "stub.deploy",
        workspaceId: h.ws.id,
        workspaceExternalId: "x",
        subject: "s",
        data: {},
      }),
    );
    await s.flush();
    assert.ok(
      lines.some((l) => /cannot store events/.test(l)),
      lines.join(""),
    );
  });
});
