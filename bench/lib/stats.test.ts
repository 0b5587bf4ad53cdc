import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { compactJson, fmtRatio, formatTable, percentile, summarize, writeResults } from "./stats.ts";

test("percentile interpolates between ranks like numpy's default", () => {
  const s = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  assert.equal(percentile(s, 0), 1);
  assert.equal(percentile(s, 50), 5.5);
  assert.equal(percentile(s, 100), 10);
  assert.ok(Math.abs(percentile(s, 95) - 9.55) < 1e-9);
  assert.equal(percentile([7], 95), 7);
  assert.ok(Number.isNaN(percentile([], 50)));
  assert.throws(() => percentile(s, 101), /outside 0..100/);
});

test("summarize sorts its input and reports min/p50/p95/p99/max/mean", () => {
  const sum = summarize([30, 10, 20]);
  assert.deepEqual(sum, { n: 3, min: 10, p50: 20, p95: 29, p99: 29.8, max: 30, mean: 20 });
});

test("formatTable aligns columns and right-aligns numeric ones", () => {
  const t = formatTable(
    ["name", "p50"],
    [
      ["raw runc", "9.5"],
      ["berth", "10.25"],
    ],
  );
  assert.equal(
    t,
    ["| name     |   p50 |", "|----------|------:|", "| raw runc |   9.5 |", "| berth    | 10.25 |"].join(
      "\n",
    ),
  );
  assert.equal(fmtRatio(13, 10), "1.30x");
  assert.equal(fmtRatio(undefined, 10), "-");
});

test("writeResults writes <name>-<date>.json and nothing else", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "berth-bench-stats-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = writeResults(
    "demo",
    { a: 1 },
    { dir: join(dir, "results"), date: new Date("2026-01-02T03:04:05Z") },
  );
  assert.equal(path, join(dir, "results", "demo-2026-01-02.json"));
  assert.deepEqual(JSON.parse(readFileSync(path, "utf8")), { a: 1 });
  assert.deepEqual(readdirSync(join(dir, "results")), ["demo-2026-01-02.json"]);
  assert.throws(() => writeResults("../escape", {}, { dir }), /not a-z0-9-/);
});

test("writeResults never replaces an earlier run of the same day", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "berth-bench-stats-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const date = new Date("2026-01-02T03:04:05Z");
  const paths = [1, 2, 3].map((run) => writeResults("demo", { run }, { dir, date }));
  assert.deepEqual(
    paths.map((p) => p.slice(dir.length + 1)),
    ["demo-2026-01-02.json", "demo-2026-01-02-2.json", "demo-2026-01-02-3.json"],
  );
  assert.deepEqual(
    paths.map((p) => JSON.parse(readFileSync(p, "utf8")).run),
    [1, 2, 3],
  );
});

test("compactJson keeps number arrays on one line and stays valid JSON", () => {
  const data = { samples: [1, 2.5, -3, 1e-7], names: ["a"], nested: { empty: [] } };
  const text = compactJson(data);
  assert.match(text, /"samples": \[1, 2\.5, -3, 1e-7\]/);
  assert.deepEqual(JSON.parse(text), data);
});
