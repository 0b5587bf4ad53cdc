// The REST routes this issue adds, through the whole app (buildHttpApp) over a
// real store, nats-server and services: task list filters and pagination,
// one task with its cost, the subscribe stream over a real socket, the
// container list, apps, the 501 routes, deployment pagination.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { resolveCostRates } from "../../coordinator/tasks/cost.ts";
import { waitFor } from "../../shared/net.ts";
import { deployInput } from "../deployments/helpers.ts";
import { addContainer, type HttpHarness, startHttpHarness } from "./harness.ts";
import { bearer } from "../helpers/auth.ts";

describe("REST routes: tasks, containers, apps, not-yet routes", () => {
  let x: HttpHarness;
  let ws: string;
  let baseUrl: string;
  const cleanups: (() => unknown)[] = [];

  after(async () => {
    for (const fn of cleanups) await fn();
  });
  before(async () => {
    x = await startHttpHarness(
      { after: (fn) => cleanups.push(fn) },
      { costRates: resolveCostRates({ cpuCorePerSecond: 0.5, memoryGibPerSecond: 8, currency: "EUR" }) },
    );
    ws = x.a.externalId;
    await x.app.listen({ host: "127.0.0.1", port: 0 });
    const addr = x.app.server.address();
    baseUrl = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  });

  const get = async (url: string, token = x.tokenA) => {
    const r = await x.app.inject({ method: "GET", url, headers: bearer(token) });
    return { status: r.statusCode, body: r.json() };
  };
  const submit = async (n: number) =>
    x.h.tasks.submit(
      x.a.id,
      x.seeded.stubId,
      Array.from({ length: n }, (_, i) => new TextEncoder().encode(String(i))),
    );
  /** Runs a task to COMPLETE as an agent reports it: started at `start`, finished 4 s later. */
  const complete = async (taskId: string, start: number) => {
    await x.h.event({ type: "started", taskId, stubId: x.seeded.stubId, at: start });
    await x.h.event({
      type: "finished",
      taskId,
      stubId: x.seeded.stubId,
      status: "COMPLETE",
      at: start + 4000,
    });
  };

  test("GET /task/{ws}: newest first, cursor pages without gaps or repeats, next_cursor null at the end", async () => {
    await submit(4);
    const all = await waitFor(async () => {
      const r = await get(`/api/v1/task/${ws}?limit=500`);
      return r.body.tasks.length >= 5 ? r.body : undefined;
    });
    assert.equal(all.next_cursor, null);
    const ids = all.tasks.map((t: { id: string }) => t.id);
    const created = all.tasks.map((t: { created_at: string }) => t.created_at);
    assert.deepEqual(created, [...created].sort().reverse());
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const r = await get(`/api/v1/task/${ws}?limit=2${cursor ? `&cursor=${cursor}` : ""}`);
      assert.equal(r.status, 200);
      assert.ok(r.body.tasks.length <= 2);
      paged.push(...r.body.tasks.map((t: { id: string }) => t.id));
      cursor = r.body.next_cursor;
    } while (cursor);
    assert.deepEqual(paged, ids);
    const t = all.tasks[0];
    assert.deepEqual(t.stub, { id: x.seeded.stubId, name: "canary-fn", type: "function" });
    assert.equal(t.cost, null, "not started: no cost yet");
  });

  test("GET /task/{ws}: filters by status (repeatable), stub, deployment and creation time", async () => {
    const [done] = await submit(1);
    await complete(done as string, Date.now());
    const completed = await waitFor(async () => {
      const r = await get(`/api/v1/task/${ws}?status=COMPLETE`);
      return r.body.tasks.length === 1 ? r.body.tasks : undefined;
    });
    assert.equal(completed[0].id, done);
    const either = await get(`/api/v1/task/${ws}?status=COMPLETE&status=PENDING&limit=500`);
    assert.ok(either.body.tasks.length >= 2);
    assert.ok(either.body.tasks.every((t: { status: string }) => ["COMPLETE", "PENDING"].includes(t.status)));
    assert.equal((await get(`/api/v1/task/${ws}?stub_id=stub-none`)).body.tasks.length, 0);
    assert.ok((await get(`/api/v1/task/${ws}?stub_id=${x.seeded.stubId}`)).body.tasks.length >= 2);
    // The deployment's stub ran no task.
    assert.deepEqual(
      (await get(`/api/v1/task/${ws}?deployment_id=${x.seeded.deployment.id}`)).body.tasks,
      [],
    );
    assert.equal((await get(`/api/v1/task/${ws}?deployment_id=dep-nope`)).status, 404);
    const future = new Date(Date.now() + 3_600_000).toISOString();
    assert.deepEqual((await get(`/api/v1/task/${ws}?created_after=${future}`)).body.tasks, []);
    const before = await get(`/api/v1/task/${ws}?created_before=${future}&limit=500`);
    assert.ok(before.body.tasks.length >= 2);
  });

  test("GET /task/{ws}: bad input is 400 naming the cause", async () => {
    const bad = async (q: string, re: RegExp) => {
      const r = await get(`/api/v1/task/${ws}?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.body.error.code, "invalid_request");
      assert.match(r.body.error.message, re);
    };
    await bad("status=DONE", /status/);
    await bad("limit=501", /limit/);
    // Coerced to Infinity, which the schema's maximum alone let through to the store.
    for (const huge of ["1e309", "-1e309", "Infinity"]) await bad(`limit=${huge}`, /limit/);
    await bad("created_after=yesterday", /created_after "yesterday" is not an ISO 8601 time/);
    await bad("cursor=!!!", /invalid cursor: not base64url/);
    const containers = await get(`/api/v1/container/${ws}?limit=1`);
    const other = Buffer.from(JSON.stringify({ l: "containers", k: [1, "x"] })).toString("base64url");
    await bad(`cursor=${other}`, /invalid cursor: it belongs to another list \(containers\)/);
    assert.equal(containers.status, 200);
    await bad("colour=blue", /must NOT have additional properties/);
  });

  test("GET /task/{ws}/{taskId}: the spec's Task, its history and the cost from the configured rates", async () => {
    const [id] = await submit(1);
    const start = Date.parse("2025-03-01T10:00:00.000Z");
    await complete(id as string, start);
    const t = await waitFor(async () => {
      const r = await get(`/api/v1/task/${ws}/${id}`);
      return r.body.status === "COMPLETE" && r.body.ended_at ? r.body : undefined;
    });
    assert.equal(t.history.length, 2);
    // 1 core x 0.5/s + 128 MiB (0.125 GiB) x 8/s, for 4 s.
    assert.deepEqual(t.cost, {
      estimate: 6,
      currency: "EUR",
      cpu: 2,
      memory: 4,
      gpu: 0,
      duration_seconds: 4,
      gpu_seconds: 0,
      final: true,
      rates: { cpu_core_per_second: 0.5, memory_gib_per_second: 8, gpu_per_second: 0 },
    });
    // The task status API keeps the spec's object: the spec says it returns no cost.
    const v2 = await get(`/v2/task/${id}/`);
    assert.equal(v2.status, 200);
    assert.equal("cost" in v2.body, false);
    assert.equal((await get(`/api/v1/task/${ws}/task-nope`)).status, 404);
  });

  test("GET /task/{ws}/{taskId}/subscribe: one status event per change, ending after the terminal one", async () => {
    const [id] = await submit(1);
    const res = await fetch(`${baseUrl}/api/v1/task/${ws}/${id}/subscribe`, {
      headers: bearer(x.tokenA),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const dec = new TextDecoder();
    let buf = "";
    const nextStatus = async (): Promise<string | null> => {
      for (;;) {
        const m = /event: status\ndata: (.*)\n\n/.exec(buf);
        if (m) {
          buf = buf.slice((m.index ?? 0) + m[0].length);
          return JSON.parse(m[1] as string).status;
        }
        const { value, done } = await reader.read();
        if (done) return null;
        buf += dec.decode(value, { stream: true });
      }
    };
    assert.equal(await nextStatus(), "PENDING");
    await x.h.event({ type: "started", taskId: id as string, stubId: x.seeded.stubId });
    assert.equal(await nextStatus(), "RUNNING");
    await x.h.event({ type: "finished", taskId: id as string, stubId: x.seeded.stubId, status: "FAILED" });
    assert.equal(await nextStatus(), "FAILED");
    assert.equal(await nextStatus(), null, "the stream ends after the terminal status");

    // An ended task: its status, then the end.
    const again = await fetch(`${baseUrl}/api/v1/task/${ws}/${id}/subscribe`, {
      headers: bearer(x.tokenA),
    });
    const text = await again.text();
    assert.equal(text.match(/event: status/g)?.length, 1);
    assert.match(text, /"status":"FAILED"/);
    const nope = await fetch(`${baseUrl}/api/v1/task/${ws}/task-nope/subscribe`, {
      headers: bearer(x.tokenA),
    });
    assert.equal(nope.status, 404);
    assert.equal(((await nope.json()) as { error: { code: string } }).error.code, "not_found");
  });

  test("GET /container/{ws}: the workspace's containers only, filtered and paged", async () => {
    const now = Date.now();
    addContainer(x.containers, {
      id: "ctr-a2",
      stubId: x.seeded.stubId,
      workspaceId: x.a.id,
      state: "starting",
      since: now + 1,
    });
    addContainer(x.containers, { id: "ctr-b1", stubId: "stub-b", workspaceId: x.b.id, since: now });
    const all = await get(`/api/v1/container/${ws}`);
    assert.deepEqual(
      all.body.containers.map((c: { id: string }) => c.id),
      ["ctr-a2", "ctr-canary"],
    );
    assert.deepEqual(Object.keys(all.body.containers[0]).sort(), [
      "agent_id",
      "id",
      "kind",
      "since",
      "status",
      "stub_id",
    ]);
    const starting = await get(`/api/v1/container/${ws}?status=starting`);
    assert.deepEqual(
      starting.body.containers.map((c: { id: string }) => c.id),
      ["ctr-a2"],
    );
    assert.equal((await get(`/api/v1/container/${ws}?stub_id=stub-b`)).body.containers.length, 0);
    const p1 = await get(`/api/v1/container/${ws}?limit=1`);
    assert.equal(p1.body.containers[0].id, "ctr-a2");
    const p2 = await get(`/api/v1/container/${ws}?limit=1&cursor=${p1.body.next_cursor}`);
    assert.equal(p2.body.containers[0].id, "ctr-canary");
    assert.equal(p2.body.next_cursor, null);
  });

  test("apps: one per deployment name with its versions; latest; one app; unknown is 404", async () => {
    await x.deployments.deploy(x.a.id, deployInput("canary-web", "endpoint"));
    await x.deployments.deploy(x.a.id, deployInput("other-app", "asgi"));
    const list = await get(`/api/v1/app/${ws}`);
    assert.equal(list.status, 200);
    assert.deepEqual(
      list.body.apps.map((a: { id: string }) => a.id),
      ["app-canary-web", "app-other-app"],
    );
    const web = list.body.apps[0];
    assert.equal(web.latest_version, 2);
    assert.equal(web.versions, 2);
    assert.equal(web.state, "active");
    assert.equal(web.stub_ids.length, 2);
    assert.equal(web.url, "http://coordinator.test:7070/endpoint/canary-web/v2");
    const paged = await get(`/api/v1/app/${ws}?limit=1`);
    assert.equal(paged.body.apps.length, 1);
    const rest = await get(`/api/v1/app/${ws}?limit=1&cursor=${paged.body.next_cursor}`);
    assert.equal(rest.body.apps[0].id, "app-other-app");
    assert.equal(rest.body.next_cursor, null);
    const latest = await get(`/api/v1/app/${ws}/latest`);
    assert.equal(latest.body.apps[0].id, "app-other-app", "the most recent activity first");
    assert.equal(latest.body.apps[1].latest_deployment.version, 2);
    const one = await get(`/api/v1/app/${ws}/app-canary-web`);
    assert.deepEqual(
      one.body.deployments.map((d: { version: number }) => d.version),
      [2, 1],
    );
    await x.deployments.stop(x.a.id, one.body.deployments[0].id);
    await x.deployments.stop(x.a.id, one.body.deployments[1].id);
    assert.deepEqual(
      (await get(`/api/v1/app/${ws}?state=stopped`)).body.apps.map((a: { id: string }) => a.id),
      ["app-canary-web"],
    );
    const nope = await get(`/api/v1/app/${ws}/canary-web`);
    assert.equal(nope.status, 404);
    assert.equal(nope.body.error.code, "not_found");
  });

  test("GET /deployment/{ws}: cursor pages", async () => {
    const all = (await get(`/api/v1/deployment/${ws}?limit=500`)).body;
    assert.equal(all.next_cursor, null);
    assert.ok(all.deployments.length >= 3);
    const first = (await get(`/api/v1/deployment/${ws}?limit=2`)).body;
    assert.equal(first.deployments.length, 2);
    const second = (await get(`/api/v1/deployment/${ws}?limit=500&cursor=${first.next_cursor}`)).body;
    assert.deepEqual(
      [...first.deployments, ...second.deployments].map((d: { id: string }) => d.id),
      all.deployments.map((d: { id: string }) => d.id),
    );
  });

  // Stacks and databases have routes of their own (test/stacks/routes.test.ts, test/databases/routes.test.ts).
});
