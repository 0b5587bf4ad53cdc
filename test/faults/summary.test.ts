// The fault suite's shared summary: the counts it derives and the promise it asserts.

import assert from "node:assert/strict";
import { test } from "node:test";
import { assertFaultSummary, countDuplicates, faultSummaryLine, tallyTasks } from "./summary.ts";

test("tallyTasks counts final, retried, lost and duplicated tasks", () => {
  const c = tallyTasks(
    [
      { id: "a", status: "COMPLETE", attempts: 1, finalEntries: 1 },
      { id: "b", status: "FAILED", attempts: 2, finalEntries: 2 },
      { id: "c", status: "RUNNING", attempts: 3 },
      { id: "a", status: "COMPLETE", attempts: 1 },
    ],
    { duplicateResults: 2, wrong: 1 },
  );
  assert.deepEqual(c, { accepted: 4, completed: 3, retried: 2, lost: 1, duplicated: 4, wrong: 1 });
  assert.equal(countDuplicates(["x", "y", "x", "x"]), 2);
});

test("assertFaultSummary prints one line and fails on anything lost, duplicated, wrong or unaccounted", () => {
  const ok = { accepted: 3, completed: 3, retried: 1, lost: 0, duplicated: 0, wrong: 0 };
  const lines: string[] = [];
  assertFaultSummary({ diagnostic: (m) => lines.push(m) }, "demo", ok);
  assert.deepEqual(lines, [faultSummaryLine("demo", ok)]);
  assert.match(
    lines[0] ?? "",
    /^fault-summary case="demo" accepted=3 completed=3 retried=1 lost=0 duplicated=0 wrong=0$/,
  );
  for (const bad of [{ lost: 1, completed: 2 }, { duplicated: 1 }, { wrong: 2 }, { completed: 2 }])
    assert.throws(
      () => assertFaultSummary({ diagnostic: () => {} }, "demo", { ...ok, ...bad }),
      /fault-summary case="demo"/,
    );
});
