// Ids: a kind prefix and 80 random bits in Crockford base32. The bits come
// from a v4 UUID with its fixed version and variant bits skipped, so no
// position of the id may be constant.

import assert from "node:assert/strict";
import { test } from "node:test";
import { hasKind, newId } from "../../shared/ids.ts";

test("newId: kind prefix, 16 Crockford base32 characters, unique, no constant position", () => {
  const ids = Array.from({ length: 4000 }, () => newId("task"));
  for (const id of ids) {
    assert.match(id, /^task-[0-9a-hjkmnp-tv-z]{16}$/);
    assert.ok(hasKind(id, "task"));
  }
  assert.equal(new Set(ids).size, ids.length);
  for (let i = 0; i < 16; i++) {
    const seen = new Set(ids.map((id) => id[5 + i]));
    // 80 bits are exactly 16 characters of 5: every position is fully random (32 values).
    assert.ok(seen.size > 16, `position ${i} takes ${seen.size} values`);
  }
});
