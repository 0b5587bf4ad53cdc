// Bot sessions with several coordinators: two engines on one SQLite store and
// a real nats-server, each with its own coordinator connection. A websocket
// listener on one coordinator hears the firing another one runs; a firing
// whose coordinator died after submitting its task is settled by a survivor's
// sweep, once, even when two sweeps race.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import { type BotSessionMessage, BotEngine, UNSETTLED_AFTER_MS } from "../../coordinator/bots/engine.ts";
import { NatsBotEventBus } from "../../coordinator/bots/event-bus.ts";
import { startNatsStore, type NatsStore } from "../helpers/nats-store.ts";
import { waitUntil } from "../helpers/wait.ts";
import { directory, TestTasks, upper } from "./helpers.ts";

const log = pino({ level: "silent" });

describe("bot sessions across coordinators", () => {
  let h: NatsStore;
  let wsId: string;
  let tasks: TestTasks;
  let now = Date.now();
  const clock = () => now;

  const engine = async () => {
    const nc = await h.connectCoordinator();
    const e = new BotEngine({
      sessions: h.store.botSessions,
      bots: directory(wsId),
      tasks,
      log,
      bus: new NatsBotEventBus(nc, log),
      clock,
    });
    h.defer(() => e.close());
    // The engine subscribes to the bus as it is built; a round trip to the
    // server makes sure the subscription is in place before anyone publishes.
    await nc.flush();
    return e;
  };
  const heard = (e: BotEngine, id: string) => {
    const got: BotSessionMessage[] = [];
    e.subscribe(id, (m) => got.push(m));
    return got;
  };

  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  before(async () => {
    h = await startNatsStore({ after: (fn) => cleanups.push(fn) });
    wsId = (await h.store.workspaces.create("bots-ha")).id;
    tasks = new TestTasks(upper);
  });

  test("a listener on one coordinator hears the firing another one runs, each message once", async () => {
    const [a, b] = [await engine(), await engine()];
    const s = await a.create(wsId, "helper");
    const onB = heard(b, s.id);
    const onA = heard(a, s.id);
    await a.push(wsId, s.id, "Question", [{ text: "hi" }], { userFacing: true });
    await waitUntil(() => onB.some((m) => m.type === "markers" && m.location === "Answer"), {
      what: "coordinator B to hear the answer",
    });
    const kinds = (got: BotSessionMessage[]) =>
      got.map((m) => (m.type === "markers" ? `markers:${m.location}` : `transition:${m.state}`));
    assert.deepEqual(kinds(onB), [
      "markers:Question",
      "transition:started",
      "transition:finished",
      "markers:Answer",
    ]);
    await waitUntil(() => onA.length === 4, { what: "coordinator A to hear its own messages" });
    assert.deepEqual(kinds(onA), kinds(onB));
  });

  test("a firing left by a dead coordinator is settled by a survivor's sweep, once", async () => {
    const [a, b, c] = [await engine(), await engine(), await engine()];
    now = Date.now();
    tasks.hold = true;
    const s = await a.create(wsId, "helper");
    await a.push(wsId, s.id, "Question", [{ text: "orphan" }], { userFacing: true });
    const inFlight = (await b.get(wsId, s.id)).state.inFlight;
    const [firing] = Object.values(inFlight);
    assert.ok(firing?.taskId, "the firing's task was submitted");
    a.close(); // The coordinator dies: nobody follows the task any more.
    tasks.hold = false;
    tasks.run(firing.taskId);
    (tasks.tasks.get(firing.taskId) as { endedAt: string | null }).endedAt = new Date(now).toISOString();
    const onB = heard(b, s.id);

    // Within the grace the survivors leave it to its follower.
    assert.equal(await b.sweep(), 0);
    assert.equal(Object.keys((await b.get(wsId, s.id)).state.inFlight).length, 1);

    now += UNSETTLED_AFTER_MS + 1;
    const settled = await Promise.all([b.sweep(), c.sweep()]);
    assert.equal(settled[0] + settled[1], 1, `one sweep settled it (${settled})`);
    const after = await b.get(wsId, s.id);
    assert.deepEqual(after.state.locations.Answer, [{ text: "ORPHAN" }]);
    assert.deepEqual(after.state.inFlight, {});
    const finishes = (await b.history(wsId, s.id)).filter((e) => e.kind === "finish");
    assert.equal(finishes.length, 1, "finished once");
    await waitUntil(() => onB.some((m) => m.type === "transition" && m.state === "finished"), {
      what: "the survivor's listener to hear the firing finish",
    });
    assert.equal(await b.sweep(), 0, "nothing left");
  });

  test("a firing taken but never submitted is given back after the bound, not before", async () => {
    const b = await engine();
    const s = await b.create(wsId, "helper");
    await h.store.botSessions.put(wsId, s.id, "Question", [{ text: "stranded" }]);
    // The dead coordinator took the marker but never submitted the task.
    const taken = await h.store.botSessions.take(wsId, s.id, "answer", { Question: 1 });
    now = Date.parse(taken.session.updatedAt);
    assert.equal(await b.sweep(), 0);
    now += 61_000;
    assert.equal(await b.sweep(), 1);
    const back = await b.get(wsId, s.id);
    assert.deepEqual(back.state.locations.Question, [{ text: "stranded" }]);
    assert.deepEqual(back.state.inFlight, {});
  });
});
