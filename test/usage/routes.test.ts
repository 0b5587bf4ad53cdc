// GET /api/v1/usage/{ws}/report (docs/usage.md) over the real HTTP app, task
// service and store: a scripted day of work is submitted through the real
// routes by two members (a function with GPUs, a task-queue deployment), run
// by agent events at chosen times (one across midnight), plus /v1 requests;
// the report matches what ran to the second by day, member and deployment,
// another workspace's work never counts, and the CSV export parses.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { gpuTypeOf } from "../../coordinator/usage/report.ts";
import { splitByDay } from "../../coordinator/usage/tally.ts";
import { deployInput } from "../deployments/helpers.ts";
import { waitUntil } from "../helpers/wait.ts";
import { type HttpHarness, startHttpHarness } from "../http/harness.ts";
import { stubConfig, stubExtra } from "../tasks/harness.ts";

const DAY1 = "2026-11-30";
const ms = (iso: string) => Date.parse(iso);

/** A strict RFC 4180 reader: quoted fields, doubled quotes, CRLF line ends; anything else throws. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let i = 0;
  if (!text.endsWith("\r\n")) throw new Error("CSV does not end with CRLF");
  while (i < text.length) {
    let field = "";
    if (text[i] === '"') {
      i++;
      for (;;) {
        if (i >= text.length) throw new Error("unterminated quoted field");
        if (text[i] === '"') {
          if (text[i + 1] === '"') {
            field += '"';
            i += 2;
          } else {
            i++;
            break;
          }
        } else field += text[i++];
      }
    } else {
      while (i < text.length && text[i] !== "," && text[i] !== "\r" && text[i] !== "\n") {
        if (text[i] === '"') throw new Error(`stray quote at ${i}`);
        field += text[i++];
      }
    }
    row.push(field);
    if (text[i] === ",") i++;
    else if (text.startsWith("\r\n", i)) {
      rows.push(row);
      row = [];
      i += 2;
    } else throw new Error(`unexpected ${JSON.stringify(text[i])} at ${i}`);
  }
  const width = rows[0]?.length;
  for (const r of rows)
    if (r.length !== width) throw new Error(`row of ${r.length} fields, header has ${width}`);
  return rows;
}

describe("usage for chargeback: GET /api/v1/usage/{ws}/report", () => {
  let s: HttpHarness;
  const tok: Record<string, { id: string; secret: string }> = {};
  let otherSecret = "";

  const get = (url: string, token: string, headers: Record<string, string> = {}) =>
    s.app.inject({ method: "GET", url, headers: { authorization: `Bearer ${token}`, ...headers } });
  const report = async (query: string, token = tok.viewer?.secret ?? "") => {
    const r = await get(`/api/v1/usage/${s.a.externalId}/report?${query}`, token);
    assert.equal(r.statusCode, 200, r.body);
    return r.json();
  };

  /** Runs a task from `start` to `end` (ISO) as its agent reports it, and waits for its row. */
  const run = async (taskId: string, stubId: string, workspaceId: string, start: string, end: string) => {
    await s.h.event({
      type: "finished",
      taskId,
      stubId,
      workspaceId,
      status: "COMPLETE",
      startedAt: ms(start),
      at: ms(end),
    });
    await waitUntil(async () => (await s.h.store.tasks.get(taskId))?.endedAt, {
      what: `task ${taskId} written`,
    });
  };

  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  before(async () => {
    s = await startHttpHarness({ after: (fn) => cleanups.push(fn) });
    for (const [name, role] of [
      ["alice", "developer"],
      ["bob", "developer"],
      ["viewer", "viewer"],
      ["runner", "runner"],
    ] as const) {
      const t = await s.h.store.tokens.create(s.a.id, { name, role });
      tok[name] = { id: t.record.id, secret: t.secret };
    }
    otherSecret = s.tokenB;

    // alice: a function on two H100s, 2 cores, 4 GiB, called through the SDK's gateway route.
    const { stub: train } = await s.h.tasks.upsertStub(s.a.id, {
      name: "train",
      type: "function",
      config: stubConfig({ runtime: { cpu: 2, gpu: "H100", memory: 4096, image_id: "" } }),
      extra: stubExtra({ cpu_millicores: 2000, gpu_types: ["H100"], gpu_count: 2 }),
    });
    const submit = async (secret: string, stubId: string) => {
      const r = await s.app.inject({
        method: "POST",
        url: `/api/v1/gateway/stubs/${stubId}/tasks`,
        headers: { authorization: `Bearer ${secret}` },
        payload: { inputs: [Buffer.from("x").toString("base64")] },
      });
      assert.equal(r.statusCode, 200, r.body);
      return r.json().task_ids[0] as string;
    };
    const t1 = await submit(tok.alice?.secret ?? "", train.id);
    await run(t1, train.id, s.a.id, `${DAY1}T10:00:00.000Z`, `${DAY1}T10:01:30.500Z`);

    // bob: a task-queue deployment (1 core, 512 MiB), one task across midnight.
    const web = await s.deployments.deploy(
      s.a.id,
      deployInput("web", "taskqueue", {
        config: { runtime: { cpu: 1, gpu: "", memory: 512, image_id: "" } },
      }),
    );
    const q = await s.app.inject({
      method: "POST",
      url: "/taskqueue/web",
      headers: { authorization: `Bearer ${tok.bob?.secret}` },
      payload: { x: 1 },
    });
    assert.equal(q.statusCode, 200, q.body);
    const t2 = q.json().task_id as string;
    await run(t2, web.stubId as string, s.a.id, `${DAY1}T23:59:00.000Z`, "2026-12-01T00:02:00.000Z");

    // B's work the same day never counts in A's report.
    const { stub: bStub } = await s.h.tasks.upsertStub(s.b.id, {
      name: "b-fn",
      type: "function",
      config: stubConfig(),
      extra: stubExtra(),
    });
    const t3 = await submit(otherSecret, bStub.id);
    await run(t3, bStub.id, s.b.id, `${DAY1}T11:00:00.000Z`, `${DAY1}T12:00:00.000Z`);

    // /v1 requests as the inference gateway records them: alice's to web, and one of B's.
    await s.h.store.inference.recordUsageRows([
      {
        workspaceId: s.a.id,
        tokenId: tok.alice?.id ?? null,
        model: "web",
        route: "chat.completions",
        deploymentId: web.id,
        taskId: null,
        stream: false,
        status: 200,
        errorCode: null,
        promptTokens: 11,
        completionTokens: 31,
        totalTokens: 42,
        ttftMs: 5,
        durationMs: 9,
        atMs: ms(`${DAY1}T15:00:00.000Z`),
      },
      {
        workspaceId: s.b.id,
        tokenId: null,
        model: "b",
        route: "chat.completions",
        deploymentId: null,
        taskId: null,
        stream: false,
        status: 200,
        errorCode: null,
        promptTokens: 1000,
        completionTokens: 1000,
        totalTokens: 2000,
        ttftMs: 5,
        durationMs: 9,
        atMs: ms(`${DAY1}T15:00:00.000Z`),
      },
    ]);
  });

  test("by day: each task's seconds, cut at midnight, with GPU, CPU and memory seconds and tokens", async () => {
    const r = await report(`from=${DAY1}&to=2026-12-01&by=day`);
    assert.equal(r.from, `${DAY1}T00:00:00.000Z`);
    assert.equal(r.to, "2026-12-02T00:00:00.000Z");
    assert.deepEqual(
      r.rows.map((x: { day: string; usage: Record<string, unknown> }) => [x.day, x.usage]),
      [
        [
          DAY1,
          {
            tasks: 2,
            sandboxes: 0,
            run_seconds: 150.5, // 90.5 s of train + 60 s of web before midnight
            cpu_seconds: 241, // 2 x 90.5 + 1 x 60
            memory_gib_seconds: 392, // 4 x 90.5 + 0.5 x 60
            gpu_seconds: 181,
            gpu_seconds_by_type: { H100: 181 },
            inference_requests: 1,
            prompt_tokens: 11,
            completion_tokens: 31,
            total_tokens: 42,
          },
        ],
        [
          "2026-12-01",
          {
            tasks: 0,
            sandboxes: 0,
            run_seconds: 120,
            cpu_seconds: 120,
            memory_gib_seconds: 60,
            gpu_seconds: 0,
            gpu_seconds_by_type: {},
            inference_requests: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
          },
        ],
      ],
    );
    assert.equal(r.totals.run_seconds, 270.5);
    assert.equal(r.totals.tasks, 2);
    assert.equal(r.storage.object_bytes, "canary code".length);
  });

  test("by member and by deployment", async () => {
    const m = await report(`from=${DAY1}&to=2026-12-01&by=member`);
    const byName = Object.fromEntries(
      m.rows.map((x: { member: { id: string; name: string } | null; usage: Record<string, number> }) => [
        x.member?.name ?? "(none)",
        [x.member?.id, x.usage.run_seconds, x.usage.gpu_seconds, x.usage.total_tokens],
      ]),
    );
    assert.deepEqual(byName, {
      alice: [tok.alice?.id, 90.5, 181, 42],
      bob: [tok.bob?.id, 180, 0, 0],
    });
    const d = await report(`from=${DAY1}&to=2026-12-01&by=deployment`);
    assert.deepEqual(
      d.rows.map((x: { deployment: string | null; usage: { run_seconds: number; tasks: number } }) => [
        x.deployment,
        x.usage.run_seconds,
        x.usage.tasks,
      ]),
      [
        [null, 90.5, 1],
        ["web", 180, 1],
      ],
    );
    const all = await report(`from=${DAY1}&to=2026-12-01&by=day,deployment,member`);
    assert.deepEqual(
      all.rows.map((x: { day: string; deployment: string | null; member: { name: string } | null }) => [
        x.day,
        x.deployment,
        x.member?.name,
      ]),
      [
        [DAY1, null, "alice"],
        [DAY1, "web", "alice"], // the /v1 request
        [DAY1, "web", "bob"],
        ["2026-12-01", "web", "bob"],
      ],
    );
  });

  test("a window cuts runs at its ends: times with a zone are exact", async () => {
    const r = await report("from=2026-11-30T10:01:00Z&to=2026-12-01T00:01:00Z&by=member");
    const secs = r.rows.map((x: { member: { name: string }; usage: { run_seconds: number } }) => [
      x.member.name,
      x.usage.run_seconds,
    ]);
    assert.deepEqual(secs, [
      ["alice", 30.5],
      ["bob", 120],
    ]);
  });

  test("CSV: Accept text/csv or format=csv, parsed strictly", async () => {
    for (const [query, headers] of [
      ["by=member", { accept: "text/csv" }],
      ["by=member&format=csv", {}],
    ] as const) {
      const r = await get(
        `/api/v1/usage/${s.a.externalId}/report?from=${DAY1}&to=2026-12-01&${query}`,
        tok.viewer?.secret ?? "",
        headers,
      );
      assert.equal(r.statusCode, 200, r.body);
      assert.match(String(r.headers["content-type"]), /^text\/csv/);
      const rows = parseCsv(r.body);
      const header = rows[0] as string[];
      assert.deepEqual(header.slice(0, 3), ["member_id", "member_name", "tasks"]);
      const col = (name: string) => header.indexOf(name);
      const alice = rows.find((x) => x[col("member_name")] === "alice") as string[];
      assert.equal(Number(alice[col("run_seconds")]), 90.5);
      assert.equal(Number(alice[col("gpu_seconds_H100")]), 181);
      assert.equal(Number(alice[col("total_tokens")]), 42);
      const bob = rows.find((x) => x[col("member_name")] === "bob") as string[];
      assert.equal(Number(bob[col("cpu_seconds")]), 180);
      assert.equal(rows.length, 3);
    }
  });

  test("who may read: viewer and up of the workspace; another workspace is 404, a runner 403", async () => {
    const url = `/api/v1/usage/${s.a.externalId}/report?from=${DAY1}`;
    assert.equal((await get(url, tok.alice?.secret ?? "")).statusCode, 200);
    assert.equal((await get(url, otherSecret)).statusCode, 404);
    assert.equal(
      (await get(`/api/v1/usage/${s.b.externalId}/report?from=${DAY1}`, tok.viewer?.secret ?? "")).statusCode,
      404,
    );
    const runner = await get(url, tok.runner?.secret ?? "");
    assert.equal(runner.statusCode, 403, runner.body);
    // B's own report has B's hour and B's tokens only.
    const b = await get(`/api/v1/usage/${s.b.externalId}/report?from=${DAY1}&to=${DAY1}`, otherSecret);
    assert.equal(b.statusCode, 200, b.body);
    assert.equal(b.json().totals.run_seconds, 3600);
    assert.equal(b.json().totals.total_tokens, 2000);
  });

  test("bad windows are refused with the cause", async () => {
    const url = `/api/v1/usage/${s.a.externalId}/report`;
    const bad = async (query: string, re: RegExp) => {
      const r = await get(`${url}?${query}`, tok.viewer?.secret ?? "");
      assert.equal(r.statusCode, 400, r.body);
      assert.match(r.json().error.message, re);
    };
    await bad("from=yesterday", /from "yesterday" is neither a date/);
    await bad("from=2026-11-30T10:00:00", /with a zone/);
    await bad("from=2026-12-02&to=2026-12-01", /from must be before to/);
    await bad("from=2024-01-01&to=2026-01-01", /at most 366 days/);
    await bad("by=week", /by "week" is not one of day, deployment, member/);
  });

  test("GPU type and day splitting", () => {
    assert.equal(gpuTypeOf(["H100", "A100"], ["a100"]), "A100");
    assert.equal(gpuTypeOf(["H100", "A100"], undefined), "H100");
    assert.equal(gpuTypeOf([], ["H100"]), "any");
    assert.deepEqual(splitByDay(ms("2026-11-30T23:00:00Z"), ms("2026-12-02T01:00:00Z")), [
      { day: "2026-11-30", ms: 3_600_000 },
      { day: "2026-12-01", ms: 86_400_000 },
      { day: "2026-12-02", ms: 3_600_000 },
    ]);
  });
});
