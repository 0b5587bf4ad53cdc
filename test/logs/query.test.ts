// The log query over a real BERTH_LOGS stream: pages by cursor, filters by
// stub, container, task (subject filters), time and text, a live follow
// resumable from a line id, and another workspace's lines never visible.
// Then the routes (inject and a listening server for SSE) and `berth logs`.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { LogLine, LogQuery } from "../../coordinator/logs/index.ts";
import { runCli } from "../helpers/cluster.ts";
import { readSse } from "../helpers/sse.ts";
import { type LogHarness, startLogHarness } from "./helpers.ts";
import { bearer } from "../helpers/auth.ts";

describe("logs", () => {
  let h: LogHarness;
  const cleanups: (() => unknown)[] = [];
  const base = Date.now() - 60_000;
  before(async () => {
    h = await startLogHarness({ after: (fn) => cleanups.push(fn) }, { heartbeatMs: 50 });
    const ws = h.ws.id;
    await h.store1({
      workspaceId: ws,
      stubId: "stub-a",
      containerId: "ctr-1",
      taskId: "task-1",
      lines: [
        { ts: base, stream: "stdout", line: "alpha one" },
        { ts: base + 1000, stream: "stdout", line: "Beta two" },
      ],
    });
    await h.store1({
      workspaceId: h.other.id,
      stubId: "stub-x",
      containerId: "ctr-9",
      taskId: "task-9",
      lines: [{ ts: base + 1500, stream: "stdout", line: "alpha secret of another workspace" }],
    });
    await h.store1({
      workspaceId: ws,
      stubId: "stub-a",
      containerId: "ctr-1",
      taskId: null,
      lines: [{ ts: base + 2000, stream: "stdout", line: "runner ready" }],
    });
    await h.store1({
      workspaceId: ws,
      stubId: "stub-b",
      containerId: "ctr-2",
      taskId: "task-2",
      lines: [
        { ts: base + 3000, stream: "stdout", line: "gamma" },
        { ts: base + 4000, stream: "stderr", line: "ALPHA three" },
      ],
    });
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  const W = () => ({ id: h.ws.id, externalId: h.ws.externalId });
  const texts = (ls: LogLine[]) => ls.map((l) => l.line);
  const ALL = ["alpha one", "Beta two", "runner ready", "gamma", "ALPHA three"];

  test("a page holds every field; pages by cursor add up to the whole, in stored order", async () => {
    const all = await h.logs.query(W());
    assert.deepEqual(texts(all.lines), ALL);
    assert.equal(all.next_cursor, null);
    const first = all.lines[0] as LogLine;
    assert.match(first.id, /^\d+-0$/);
    assert.deepEqual(
      { ...first, id: "" },
      {
        id: "",
        timestamp: new Date(base).toISOString(),
        workspace_id: h.ws.externalId,
        stub_id: "stub-a",
        container_id: "ctr-1",
        task_id: "task-1",
        stream: "stdout",
        line: "alpha one",
      },
    );
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const p = await h.logs.query(W(), { limit: 2, ...(cursor ? { cursor } : {}) });
      seen.push(...texts(p.lines));
      cursor = p.next_cursor ?? undefined;
      pages++;
    } while (cursor);
    assert.deepEqual(seen, ALL);
    assert.equal(pages, 3);
    // A cursor in the middle of a batch resumes at the next line of that batch.
    const p1 = await h.logs.query(W(), { limit: 1 });
    assert.deepEqual(
      texts((await h.logs.query(W(), { cursor: p1.next_cursor as string })).lines),
      ALL.slice(1),
    );
  });

  test("filters: stub, container, task, time range and case-insensitive text", async () => {
    assert.deepEqual(texts((await h.logs.query(W(), { stubId: "stub-b" })).lines), ["gamma", "ALPHA three"]);
    assert.deepEqual(texts((await h.logs.query(W(), { containerId: "ctr-1" })).lines), ALL.slice(0, 3));
    assert.deepEqual(texts((await h.logs.query(W(), { taskId: "task-1" })).lines), ["alpha one", "Beta two"]);
    assert.deepEqual(texts((await h.logs.query(W(), { text: "alpha" })).lines), ["alpha one", "ALPHA three"]);
    const since = new Date(base + 1000).toISOString();
    const until = new Date(base + 3000).toISOString();
    assert.deepEqual(texts((await h.logs.query(W(), { since, until })).lines), ["Beta two", "runner ready"]);
    assert.deepEqual(
      texts((await h.logs.query(W(), { taskId: "task-9" })).lines),
      [],
      "not another workspace's task",
    );
    // The other workspace sees only its own line.
    const theirs = await h.logs.query({ id: h.other.id, externalId: h.other.externalId }, { text: "alpha" });
    assert.deepEqual(texts(theirs.lines), ["alpha secret of another workspace"]);
  });

  test("bad input is refused naming what is wrong", async () => {
    const refuses = async (q: Parameters<LogQuery["query"]>[1], re: RegExp) =>
      assert.rejects(
        h.logs.query(W(), q),
        (e: Error & { code?: string }) => e.code === "invalid_request" && re.test(e.message),
      );
    await refuses({ stubId: "stub.a" }, /stub_id/);
    await refuses({ taskId: ">" }, /task_id/);
    await refuses({ cursor: "12" }, /cursor/);
    await refuses({ since: "yesterday" }, /since/);
    await refuses({ limit: 0 }, /limit/);
  });

  test("follow: new lines live, not another workspace's; resumes after a line id; ends on abort", async () => {
    const abort = new AbortController();
    const feed = await h.logs.follow(W(), {}, undefined, abort.signal);
    await h.store1({
      workspaceId: h.other.id,
      stubId: "stub-x",
      containerId: "ctr-9",
      taskId: null,
      lines: [{ ts: Date.now(), stream: "stdout", line: "theirs live" }],
    });
    await h.store1({
      workspaceId: h.ws.id,
      stubId: "stub-a",
      containerId: "ctr-3",
      taskId: "task-3",
      lines: [
        { ts: Date.now(), stream: "stdout", line: "live one" },
        { ts: Date.now(), stream: "stdout", line: "live two" },
      ],
    });
    const got: LogLine[] = [];
    for await (const l of feed) {
      got.push(l);
      if (got.length === 2) break;
    }
    assert.deepEqual(texts(got), ["live one", "live two"]);
    abort.abort();

    const resumed = await h.logs.follow(W(), { containerId: "ctr-3" }, (got[0] as LogLine).id);
    const next = await resumed.next();
    assert.equal((next.value as LogLine).line, "live two");
    await resumed.return?.(undefined);

    // Aborting ends an iteration that is waiting.
    const stop = new AbortController();
    const idle = await h.logs.follow(W(), { taskId: "task-none" }, undefined, stop.signal);
    const waiting = idle.next();
    stop.abort();
    assert.equal((await waiting).done, true);
  });

  test("routes: pages and filters as JSON; another workspace's token gets 404; bad input 400", async () => {
    const get = (url: string, token = h.token) =>
      h.app.inject({ method: "GET", url, headers: bearer(token) });
    const r = await get(`/api/v1/logs/${h.ws.externalId}?task_id=task-1&limit=1`);
    assert.equal(r.statusCode, 200);
    const page = r.json() as { lines: LogLine[]; next_cursor: string | null };
    assert.deepEqual(texts(page.lines), ["alpha one"]);
    assert.ok(page.next_cursor);
    const r2 = await get(`/api/v1/logs/${h.ws.externalId}?task_id=task-1&cursor=${page.next_cursor}`);
    assert.deepEqual(texts((r2.json() as { lines: LogLine[] }).lines), ["Beta two"]);
    const text = await get(`/api/v1/logs/${h.ws.externalId}?text=ALPHA&stub_id=stub-b`);
    assert.deepEqual(texts((text.json() as { lines: LogLine[] }).lines), ["ALPHA three"]);

    assert.equal((await get(`/api/v1/logs/${h.ws.externalId}`, h.otherToken)).statusCode, 404);
    assert.equal((await get(`/api/v1/logs/${h.ws.externalId}/stream`, h.otherToken)).statusCode, 404);
    assert.equal((await get(`/api/v1/logs/${h.ws.externalId}`, "bt_nope")).statusCode, 401);
    const bad = await get(`/api/v1/logs/${h.ws.externalId}?container_id=a*b`);
    assert.equal(bad.statusCode, 400);
    assert.match((bad.json() as { error: { message: string } }).error.message, /container_id/);
    assert.equal((await get(`/api/v1/logs/${h.ws.externalId}?limit=5000`)).statusCode, 400);
    assert.equal((await get(`/api/v1/logs/${h.ws.externalId}/stream?cursor=nope`)).statusCode, 400);
  });

  test("stream route: live lines as SSE with heartbeats; resumes from Last-Event-ID", async () => {
    const get = (path: string, headers: Record<string, string> = {}) =>
      fetch(`${h.baseUrl}${path}`, { headers: { ...bearer(h.token), ...headers } });
    const res = await get(`/api/v1/logs/${h.ws.externalId}/stream?stub_id=stub-s`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
    const lines = ["s0", "s1"].map((line) => ({ ts: Date.now(), stream: "stdout" as const, line }));
    await h.store1({ workspaceId: h.ws.id, stubId: "stub-s", containerId: "ctr-s", taskId: null, lines });
    const { evs, comments } = await readSse(res, (e, c) => e.length >= 2 && c.includes("keep-alive"));
    assert.deepEqual(
      evs.map((e) => [e.event, JSON.parse(e.data ?? "{}").line]),
      [
        ["log", "s0"],
        ["log", "s1"],
      ],
    );
    assert.ok(comments.includes("keep-alive"));
    assert.equal(JSON.parse(evs[0]?.data ?? "{}").id, evs[0]?.id);
    const again = await readSse(
      await get(`/api/v1/logs/${h.ws.externalId}/stream?stub_id=stub-s`, {
        "last-event-id": evs[0]?.id as string,
      }),
      (e) => e.length >= 1,
    );
    assert.equal(JSON.parse(again.evs[0]?.data ?? "{}").line, "s1");
  });

  test("berth logs: lines of a task as text and JSON; --grep; a bad --since is refused", async () => {
    const env = { SERVICE_TOKEN: h.token, BERTH_URL: h.baseUrl, BERTH_PROFILE: "", BERTH_CONFIG: "" };
    const text = await runCli(["logs", "--task", "task-1"], env);
    assert.equal(text.code, 0, text.stderr);
    assert.deepEqual(text.stdout.trim().split("\n"), [
      `${new Date(base).toISOString()} ctr-1 task-1 alpha one`,
      `${new Date(base + 1000).toISOString()} ctr-1 task-1 Beta two`,
    ]);
    const json = await runCli(["logs", "--grep", "alpha", "--since", "10m", "--json"], env);
    assert.equal(json.code, 0, json.stderr);
    const parsed = json.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as LogLine);
    assert.deepEqual(texts(parsed), ["alpha one", "ALPHA three"]);
    assert.equal(parsed[1]?.stream, "stderr");
    const bad = await runCli(["logs", "--since", "last tuesday"], env);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /--since "last tuesday"/);
  });

  test("berth logs --follow prints new lines until interrupted", async () => {
    const { spawn } = await import("node:child_process");
    const { CLI_MAIN } = await import("../helpers/cluster.ts");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", CLI_MAIN, "logs", "--follow", "--container", "ctr-f"],
      {
        env: {
          ...process.env,
          SERVICE_TOKEN: h.token,
          BERTH_URL: h.baseUrl,
          BERTH_PROFILE: "",
          BERTH_CONFIG: "",
        },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
    cleanups.push(() => child.exitCode === null && child.kill("SIGKILL"));
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    // Lines keep coming until one shows: the stream may open after the first.
    const end = Date.now() + 30_000;
    let n = 0;
    while (!out.includes("follow me") && Date.now() < end) {
      await h.store1({
        workspaceId: h.ws.id,
        stubId: "stub-f",
        containerId: "ctr-f",
        taskId: null,
        lines: [{ ts: Date.now(), stream: "stdout", line: `follow me ${n++}` }],
      });
      await new Promise((r) => setTimeout(r, 300));
    }
    child.kill("SIGINT");
    assert.equal(await exited, 0);
    assert.match(out, /ctr-f follow me \d+/);
  });
});
