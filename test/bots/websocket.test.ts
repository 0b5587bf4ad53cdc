// A bot session's websocket (coordinator/bots/websocket.ts) on a real HTTP
// server with the `ws` client: the session first, then its events; pushes;
// a bad message answered with an error frame while the session stays open;
// hidden locations; resuming by id; 401 without a token, 404 for another
// workspace's session or bot; a bot deployed with authorized=False by id
// without a token. The engine and store are real; tasks are the test's.

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import WebSocket from "ws";
import { BotEngine, type ResolvedBot } from "../../coordinator/bots/engine.ts";
import { attachBotUpgrades } from "../../coordinator/bots/websocket.ts";
import { Store } from "../../coordinator/records.ts";
import { BerthError } from "../../shared/errors.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { waitUntil } from "../helpers/wait.ts";
import { DEF, directory, TestTasks, upper } from "./helpers.ts";

const sqlite = STORE_ENGINES.find((e) => e.name === "sqlite");
if (!sqlite) throw new Error("no sqlite engine");

type Message = Record<string, unknown>;

/** Opens a websocket; answers the socket and its messages, or the HTTP status of a refusal. */
function connect(
  url: string,
  token?: string,
): Promise<{ ws: WebSocket; got: Message[] } | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
    const got: Message[] = [];
    ws.on("message", (d) => got.push(JSON.parse(d.toString()) as Message));
    ws.once("open", () => resolve({ ws, got }));
    ws.once("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once("error", reject);
  });
}

const until = (got: Message[], match: (m: Message) => boolean, what: string) =>
  waitUntil(() => got.find(match), { what, describe: () => JSON.stringify(got) });

describe("bot session websocket", () => {
  let store: Store;
  let server: Server;
  let base: string;
  let a: { id: string; token: string };
  let b: { token: string };
  const open: WebSocket[] = [];
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    store = await Store.open(await sqlite.url({ after: (fn) => cleanups.push(fn) }));
    const wa = await store.workspaces.create("a");
    const wb = await store.workspaces.create("b");
    a = { id: wa.id, token: (await store.tokens.create(wa.id)).secret };
    b = { token: (await store.tokens.create(wb.id)).secret };
    const named = directory(wa.id);
    const log = pino({ level: "silent" });
    const engine = new BotEngine({
      sessions: store.botSessions,
      bots: named,
      tasks: new TestTasks(upper),
      log,
    });
    const bots = {
      byName: (ws: string, name: string) => named.byName(ws, name),
      async byId(id: string): Promise<ResolvedBot & { workspaceId: string }> {
        if (id === "dep-public")
          return { deploymentId: id, name: "helper", authorized: false, def: DEF, workspaceId: wa.id };
        if (id === "dep-1")
          return { deploymentId: id, name: "helper", authorized: true, def: DEF, workspaceId: wa.id };
        throw new BerthError("not_found", `deployment ${id} not found`);
      },
    };
    server = createServer((_req, res) => res.end());
    attachBotUpgrades(server, { engine, bots, tokens: store.tokens, log });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    for (const ws of open) ws.terminate();
    await new Promise((r) => server?.close(r));
    await store?.close();
    for (const fn of cleanups.reverse()) await fn();
  });

  const session = async (path: string, token?: string) => {
    const c = await connect(`${base}${path}`, token);
    if (!("ws" in c)) throw new Error(`refused ${c.status}: ${c.body}`);
    open.push(c.ws);
    const first = await until(c.got, (m) => m.type === "session", "the session");
    return { ...c, session: first.session as { id: string; locations: Record<string, unknown[]> } };
  };

  test("the session, a push, the transition's events and its output; a bad message is answered, the session goes on", async () => {
    const s = await session("/bot/helper/session", a.token);
    assert.deepEqual(s.session.locations, { Question: [], Answer: [] }, "the hidden location is not shown");
    s.ws.send(JSON.stringify({ type: "push", location: "Question", markers: [{ text: "hi" }] }));
    const answer = await until(s.got, (m) => m.type === "markers" && m.location === "Answer", "the answer");
    assert.deepEqual(answer.markers, [{ text: "HI" }]);
    const states = s.got.filter((m) => m.type === "transition").map((m) => m.state);
    assert.deepEqual(states, ["started", "finished"]);
    assert.ok(
      s.got.some((m) => m.type === "markers" && m.location === "Question"),
      "the user's own push is an event too",
    );

    s.ws.send("not json");
    const bad = await until(s.got, (m) => m.type === "error", "the error frame");
    assert.equal(bad.code, "invalid_json");
    s.ws.send(JSON.stringify({ type: "push", location: "Note", markers: [{ n: 1 }] }));
    await until(
      s.got,
      (m) => m.type === "error" && /no location Note/.test(String(m.message)),
      "hidden location refused",
    );
    s.ws.send(JSON.stringify({ type: "push", location: "Question", markers: [{ text: "again" }] }));
    await until(
      s.got,
      (m) => m.type === "markers" && JSON.stringify(m.markers) === '[{"text":"AGAIN"}]',
      "the second answer",
    );

    const resumed = await session(`/bot/helper/session?session_id=${s.session.id}`, a.token);
    assert.equal(resumed.session.id, s.session.id);
    assert.deepEqual(resumed.session.locations.Answer, [{ text: "HI" }, { text: "AGAIN" }]);
  });

  test("no token is 401; another workspace's session or bot is 404", async () => {
    const mine = await session("/bot/helper/session", a.token);
    const refused = async (path: string, token?: string) => {
      const c = await connect(`${base}${path}`, token);
      assert.ok("status" in c, `${path} was accepted`);
      return c;
    };
    let r = await refused("/bot/helper/session");
    assert.equal(r.status, 401);
    assert.match(JSON.parse(r.body).error.message, /Authorization: Bearer/);
    r = await refused(`/bot/helper/session?session_id=${mine.session.id}`, b.token);
    assert.equal(r.status, 404, "B has no bot helper");
    r = await refused("/bot/id/dep-1/session", b.token);
    assert.equal(r.status, 404, "another workspace's bot by id");
    r = await refused("/bot/id/dep-1/session");
    assert.equal(r.status, 401, "a bot that needs a token");
    r = await refused(`/bot/helper/session?session_id=bs-nosuch`, a.token);
    assert.equal(r.status, 404);
    r = await refused("/bot/helper/session", "bt_not-a-token");
    assert.equal(r.status, 401);
  });

  test("a bot deployed with authorized=False is open by deployment id without a token", async () => {
    const s = await session("/bot/id/dep-public/session");
    s.ws.send(JSON.stringify({ type: "push", location: "Question", markers: [{ text: "open" }] }));
    const answer = await until(s.got, (m) => m.type === "markers" && m.location === "Answer", "the answer");
    assert.deepEqual(answer.markers, [{ text: "OPEN" }]);
  });
});
