// The dashboard's SVG line (dashboard/chart.ts): a path per run of values,
// broken where a bucket has none, a lone point drawn as a dot.

import assert from "node:assert/strict";
import { test } from "node:test";
import { linePath } from "../../dashboard/chart.ts";

const t0 = Date.parse("2030-01-01T00:00:00.000Z");
const at = (i: number) => new Date(t0 + i * 60_000).toISOString();
const x = (t: number) => (t - t0) / 60_000;
const y = (v: number) => 100 - v;

test("consecutive values are one line; a null breaks it; a lone value is a dot", () => {
  const points: [string, number | null][] = [
    [at(0), 10],
    [at(1), 20],
    [at(2), null],
    [at(3), 30],
    [at(4), null],
    [at(5), 40],
    [at(6), 50],
  ];
  assert.equal(linePath(points, x, y), "M0.0 90.0 L1.0 80.0 M3.0 70.0 l0 0 M5.0 60.0 L6.0 50.0");
});

test("no values, no path", () => {
  assert.equal(linePath([[at(0), null]], x, y), "");
  assert.equal(linePath([], x, y), "");
});
