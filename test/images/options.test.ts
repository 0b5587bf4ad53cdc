// Image store options that need neither root nor tools.

import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveImageStoreOptions } from "../../agent/images/options.ts";
import { BerthError } from "../../shared/errors.ts";

test("tagFreshnessMs: 60 s by default, 0 and Infinity allowed, negative or NaN refused", () => {
  assert.equal(resolveImageStoreOptions({ root: "/tmp/x" }).tagFreshnessMs, 60_000);
  assert.equal(resolveImageStoreOptions({ root: "/tmp/x", tagFreshnessMs: 0 }).tagFreshnessMs, 0);
  assert.equal(
    resolveImageStoreOptions({ root: "/tmp/x", tagFreshnessMs: Number.POSITIVE_INFINITY }).tagFreshnessMs,
    Number.POSITIVE_INFINITY,
  );
  for (const bad of [-1, Number.NaN]) {
    assert.throws(
      () => resolveImageStoreOptions({ root: "/tmp/x", tagFreshnessMs: bad }),
      (e: unknown) => e instanceof BerthError && /tagFreshnessMs/.test(e.message),
    );
  }
});
