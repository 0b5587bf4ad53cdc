// The bot session routes (coordinator/bots/routes.ts) over the real
// BotEngine and a SQLite store: schema and clear 4xx for bad input, the token,
// workspace scoping (another workspace's bot or session is 404), a marker
// driven through a transition, a failed firing giving its markers back, and
// a new engine on the same store (a restarted coordinator) finishing the
// firing the old one left in flight. The tasks are this test's: each
// submitted task's JSON payload is answered by the test, as a runner would.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import { BotEngine } from "../../coordinator/bots/engine.ts";
import { botRoutes } from "../../coordinator/bots/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { Store } from "../../coordinator/records.ts";
import { bearer } from "../helpers/auth.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { waitUntil } from "../helpers/wait.ts";
import { directory, TestTasks, upper } from "./helpers.ts";

const engine = STORE_ENGINES.find((e) => e.name === "sqlite");
if (!engine) throw new Error("no sqlite engine");

describe("bot session routes", () => {
  let app: ReturnType<typeof routesApp>;
  let tasks: TestTasks;
  let store: Store;
  const cleanups: (() => unknown)[] = [];
  let ws: { id: string; ext: string; token: string };
  let other: { ext: string; token: string };
  const log = pino({ level: "silent" });

  before(async () => {
    store = await Store.open(await engine.url({ after: (fn) => cleanups.push(fn) }));
    const a = await store.workspaces.create("bots");
    const b = await store.workspaces.create("elsewhere");
    ws = { id: a.id, ext: a.externalId, token: (await store.tokens.create(a.id)).secret };
    other = { ext: b.externalId, token: (await store.tokens.create(b.id)).secret };
    tasks = new TestTasks(upper);
    const bots = new BotEngine({ sessions: store.botSessions, bots: directory(a.id), tasks, log });
    app = routesApp();
    await app.register(tokenScope(store.tokens, botRoutes(bots)));
  });
  after(async () => {
    await app?.close();
    await store?.close();
    for (const fn of cleanups.reverse()) await fn();
  });

  const call = (method: "GET" | "POST", url: string, payload?: unknown, token = ws.token) =>
    app.inject({
      method,
      url,
      headers: bearer(token),
      ...(payload !== undefined ? { payload: payload as object } : {}),
    });
  const open = async () => {
    const r = await call("POST", `/api/v1/bot/${ws.ext}/helper/sessions`);
    assert.equal(r.statusCode, 201, r.body);
    return (r.json() as { session: { id: string; locations: Record<string, unknown[]> } }).session;
  };
  const read = async (id: string) => {
    const r = await call("GET", `/api/v1/bot/${ws.ext}/sessions/${id}`);
    assert.equal(r.statusCode, 200, r.body);
    return r.json() as {
      session: { locations: Record<string, unknown[]>; in_flight: unknown[]; version: number };
      history: { seq: number; kind: string; body: Record<string, unknown> }[];
    };
  };

  test("a marker pushed into a location goes through the transition; the history records each step", async () => {
    const s = await open();
    assert.deepEqual(s.locations, { Question: [], Answer: [], Note: [] });
    const r = await call("POST", `/api/v1/bot/${ws.ext}/sessions/${s.id}/markers`, {
      location: "Question",
      markers: [{ text: "hello" }],
    });
    assert.equal(r.statusCode, 200, r.body);
    await waitUntil(async () => (await read(s.id)).session.locations.Answer?.length === 1, {
      what: "the answer",
    });
    const got = await read(s.id);
    assert.deepEqual(got.session.locations, { Question: [], Answer: [{ text: "HELLO" }], Note: [] });
    assert.deepEqual(got.session.in_flight, []);
    assert.deepEqual(
      got.history.map((h) => h.kind),
      ["created", "put", "take", "start", "finish"],
    );
    const start = got.history.find((h) => h.kind === "start");
    const taskId = start?.body.task_id as string;
    assert.equal(tasks.tasks.get(taskId)?.stubId, "stub-answer", "the task ran on the transition's stub");
    assert.deepEqual(tasks.payloads.get(taskId)?.session, {
      id: s.id,
      bot: "helper",
      model: "tiny-bigram",
      firing: 3,
    });
  });

  test("a failed firing gives its markers back and records why", async () => {
    const s = await open();
    await call("POST", `/api/v1/bot/${ws.ext}/sessions/${s.id}/markers`, {
      location: "Question",
      markers: [{ text: "fail" }],
    });
    await waitUntil(async () => (await read(s.id)).history.some((h) => h.kind === "fail"), {
      what: "the failure",
    });
    const got = await read(s.id);
    assert.deepEqual(got.session.locations.Question, [{ text: "fail" }]);
    assert.match(String(got.history.at(-1)?.body.error), /ValueError: cannot answer that/);
  });

  test("bad input is a clear 400", async () => {
    const s = await open();
    const push = (body: unknown) => call("POST", `/api/v1/bot/${ws.ext}/sessions/${s.id}/markers`, body);
    let r = await push({ location: "Nowhere", markers: [{ text: "x" }] });
    assert.equal(r.statusCode, 400);
    assert.match(r.json().error.message, /no location Nowhere \(its locations: Question, Answer, Note\)/);
    r = await push({ location: "Question", markers: ["just text"] });
    assert.equal(r.statusCode, 400, r.body);
    r = await push({ location: "Question" });
    assert.equal(r.statusCode, 400);
    assert.match(r.json().error.message, /markers/);
    r = await push({ location: "Question", markers: [] });
    assert.equal(r.statusCode, 400);
    r = await call("POST", `/api/v1/bot/${ws.ext}/nobot/sessions`);
    assert.equal(r.statusCode, 404);
    assert.match(r.json().error.message, /nobot not found/);
  });

  test("another workspace's bot and sessions are 404; no token is 401", async () => {
    const s = await open();
    let r = await call("GET", `/api/v1/bot/${ws.ext}/sessions/${s.id}`, undefined, other.token);
    assert.equal(r.statusCode, 404);
    r = await call("GET", `/api/v1/bot/${other.ext}/sessions/${s.id}`, undefined, other.token);
    assert.equal(r.statusCode, 404);
    r = await call(
      "POST",
      `/api/v1/bot/${other.ext}/sessions/${s.id}/markers`,
      { location: "Question", markers: [{ text: "x" }] },
      other.token,
    );
    assert.equal(r.statusCode, 404);
    r = await call("POST", `/api/v1/bot/${other.ext}/helper/sessions`, undefined, other.token);
    assert.equal(r.statusCode, 404, "the other workspace has no bot helper");
    r = await app.inject({ method: "GET", url: `/api/v1/bot/${ws.ext}/sessions/${s.id}` });
    assert.equal(r.statusCode, 401);
  });

  test("a new engine on the same store (a restarted coordinator) finishes the firing left in flight", async () => {
    tasks.hold = true;
    const s = await open();
    await call("POST", `/api/v1/bot/${ws.ext}/sessions/${s.id}/markers`, {
      location: "Question",
      markers: [{ text: "later" }],
    });
    const before = await read(s.id);
    assert.equal(before.session.in_flight.length, 1);
    const [taskId] = [...tasks.tasks.keys()].slice(-1) as [string];
    const restarted = new BotEngine({ sessions: store.botSessions, bots: directory(ws.id), tasks, log });
    assert.equal(await restarted.resume(), 1);
    tasks.hold = false;
    tasks.run(taskId);
    await waitUntil(async () => (await read(s.id)).session.locations.Answer?.length === 1, {
      what: "the answer",
    });
    assert.deepEqual((await read(s.id)).session.locations.Answer, [{ text: "LATER" }]);
    restarted.close();
  });
});
