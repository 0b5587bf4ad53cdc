// GET /api/v1/gateway/deployments/{id}/logs over a real socket: a real store
// for tokens, the shared in-memory fake agent (behind a real streamLogs
// iterator) for the agents, a container list the test changes.

import assert from "node:assert/strict";
import { request } from "node:http";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import Fastify, { type FastifyInstance } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { installErrorHandlers } from "../../coordinator/http/errors.ts";
import { deploymentLogRoutes, type StubContainer } from "../../coordinator/logs/deployment-log-routes.ts";
import { Store } from "../../coordinator/records.ts";
import { tempDir } from "../helpers/env.ts";
import { transportFake, type FakeContainerApi } from "../helpers/fake-container-api.ts";
import { bearer } from "../helpers/auth.ts";
import { waitUntil } from "../helpers/wait.ts";

interface Line {
  container_id: string;
  stream: string;
  line: string;
  ts: number;
}

/** Opens the NDJSON stream; lines arrive in `lines`, `close()` disconnects like a Ctrl-C. */
function openLogs(port: number, path: string, token: string) {
  const lines: Line[] = [];
  let status = 0;
  let type = "";
  const req = request({ port, path, headers: bearer(token) });
  const ended = new Promise<void>((resolve, reject) => {
    req.on("response", (res) => {
      status = res.statusCode ?? 0;
      type = String(res.headers["content-type"]);
      createInterface({ input: res })
        .on("line", (l) => lines.push(JSON.parse(l) as Line))
        // Our own close() aborts the response.
        .on("error", () => resolve());
      res.on("end", resolve);
      res.on("close", resolve);
    });
    req.on("error", (e) => (req.destroyed ? resolve() : reject(e)));
  });
  req.end();
  return { lines, ended, close: () => req.destroy(), info: () => ({ status, type }) };
}

describe("deployment log route", () => {
  const cleanups: (() => unknown)[] = [];
  let app: FastifyInstance;
  let port: number;
  let token: string;
  let otherToken: string;
  let wsId: string;
  const agents = new Map<string, FakeContainerApi>([
    ["agent-a", transportFake()],
    ["agent-b", transportFake()],
  ]);
  const containers = new Map<string, StubContainer[]>();
  const listeners = new Set<() => void>();
  const changed = () => {
    for (const fn of listeners) fn();
  };
  const lookups: [string, string][] = [];

  before(async () => {
    const store = await Store.open(`sqlite:${tempDir({ after: (fn) => cleanups.push(fn) })}/b.db`);
    cleanups.push(() => store.close());
    const ws = await store.workspaces.create("logs");
    const other = await store.workspaces.create("logs-other");
    wsId = ws.id;
    token = (await store.tokens.create(ws.id)).secret;
    otherToken = (await store.tokens.create(other.id)).secret;
    app = Fastify({ logger: process.env.DEBUG_LOGS ? { level: "debug" } : false });
    app.decorateRequest("principal", null);
    installErrorHandlers(app);
    await app.register(
      deploymentLogRoutes({
        tokens: store.tokens,
        async lookup(workspaceId, id) {
          lookups.push([workspaceId, id]);
          if (workspaceId !== wsId || id !== "dep_1")
            throw new BerthError("not_found", `deployment ${id} not found`);
          return { stubId: "stub_1" };
        },
        containersOf: (stubId) => containers.get(stubId) ?? [],
        onContainersChange(fn) {
          listeners.add(fn);
          return () => listeners.delete(fn);
        },
        agents: { client: (agentId) => agents.get(agentId)! },
      }),
    );
    await app.listen({ host: "127.0.0.1", port: 0 });
    cleanups.push(() => app.close());
    port = (app.server.address() as { port: number }).port;
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  test("another workspace's deployment and an unknown id are not_found; no token is 401", async () => {
    for (const [id, t] of [
      ["dep_1", otherToken],
      ["dep_nope", token],
    ] as const) {
      const r = await app.inject({
        method: "GET",
        url: `/api/v1/gateway/deployments/${id}/logs`,
        headers: bearer(t),
      });
      assert.equal(r.statusCode, 200);
      assert.equal(r.json().ok, false);
      assert.equal(r.json().error.code, "not_found");
    }
    const anon = await app.inject({ method: "GET", url: "/api/v1/gateway/deployments/dep_1/logs" });
    assert.equal(anon.statusCode, 401);
    const bad = await app.inject({
      method: "GET",
      url: "/api/v1/gateway/deployments/dep_1/logs?tail=-3",
      headers: bearer(token),
    });
    assert.equal(bad.json().ok, false);
    assert.equal(bad.json().error.code, "invalid_request");
  });

  test("without follow: the tail of each running container, then the stream ends", async () => {
    const a = agents.get("agent-a")!;
    await a.runContainer({ id: "ctr-old" } as never);
    for (let i = 0; i < 5; i++) a.appendLog("ctr-old", i % 2 ? "stderr" : "stdout", `old ${i}`);
    containers.set("stub_1", [
      { id: "ctr-old", agentId: "agent-a", state: "running" },
      { id: "ctr-starting", agentId: "agent-b", state: "starting" },
    ]);
    const s = openLogs(port, "/api/v1/gateway/deployments/dep_1/logs?tail=2", token);
    await s.ended;
    assert.equal(s.info().status, 200);
    assert.match(s.info().type, /^application\/x-ndjson/);
    assert.deepEqual(
      s.lines.map((l) => [l.container_id, l.stream, l.line]),
      // The last two lines of each stream, stdout's first, as an agent's spools give them.
      [
        ["ctr-old", "stdout", "old 2"],
        ["ctr-old", "stdout", "old 4"],
        ["ctr-old", "stderr", "old 1"],
        ["ctr-old", "stderr", "old 3"],
      ],
    );
    assert.equal(typeof s.lines[0]?.ts, "number");
    assert.deepEqual(lookups.at(-1), [wsId, "dep_1"]);
  });

  test("follow: new containers from their first line, live lines, until the client leaves", async () => {
    const a = agents.get("agent-a")!;
    const b = agents.get("agent-b")!;
    const s = openLogs(port, "/api/v1/gateway/deployments/dep_1/logs?follow=1&tail=1", token);
    // tail=1 is the last line of each stream.
    await waitUntil(() => s.lines.length === 2, {
      what: "the old container's tail",
      timeoutMs: 5000,
      intervalMs: 10,
    });
    assert.equal(s.lines[0]?.line, "old 4");
    assert.equal(s.lines[1]?.line, "old 3");
    assert.equal(listeners.size, 1);

    // A container that starts while the client watches: everything it printed, then what follows.
    await b.runContainer({ id: "ctr-starting" } as never);
    b.appendLog("ctr-starting", "stdout", "booting");
    containers.set("stub_1", [
      { id: "ctr-old", agentId: "agent-a", state: "running" },
      { id: "ctr-starting", agentId: "agent-b", state: "running" },
    ]);
    changed();
    await waitUntil(() => s.lines.some((l) => l.line === "booting"), {
      what: "the new container's first line",
      timeoutMs: 5000,
      intervalMs: 10,
    });
    b.appendLog("ctr-starting", "stderr", "ready");
    a.appendLog("ctr-old", "stdout", "request 1");
    await waitUntil(() => s.lines.length === 5, { what: "live lines", timeoutMs: 5000, intervalMs: 10 });
    assert.deepEqual(
      s.lines
        .slice(2)
        .map((l) => `${l.container_id}/${l.stream}: ${l.line}`)
        .sort(),
      ["ctr-old/stdout: request 1", "ctr-starting/stderr: ready", "ctr-starting/stdout: booting"],
    );
    // A change event for containers already followed starts nothing twice.
    changed();
    a.appendLog("ctr-old", "stdout", "request 2");
    await waitUntil(() => s.lines.length === 6, { what: "one more line", timeoutMs: 5000, intervalMs: 10 });
    assert.equal(s.lines.filter((l) => l.line === "booting").length, 1);

    s.close();
    await s.ended;
    await waitUntil(() => [a.lastLogSignal, b.lastLogSignal].every((sig) => sig?.aborted === true), {
      what: "the agents' streams cancelled",
      timeoutMs: 5000,
      intervalMs: 10,
    });
    await waitUntil(() => listeners.size === 0, { what: "unsubscribed", timeoutMs: 5000, intervalMs: 10 });
  });
});
