// checkBody against the binding rule of sdk/python/berth/handler_call.py
// (bind_endpoint_call), case by case.

import assert from "node:assert/strict";
import { test } from "node:test";
import { checkBody, describeBodyMismatch } from "../../coordinator/endpoints/handler-params.ts";
import type { HandlerParams } from "../../shared/tasks.ts";

const p = (names: string[], required: string[], var_keyword = false, context = false): HandlerParams => ({
  names,
  required,
  var_keyword,
  context,
});
const ok = { unknown: [], missing: [] };

test("keyword binding: unknown keys and missing required parameters are named", () => {
  const params = p(["a", "b", "c"], ["a"]);
  assert.deepEqual(checkBody(params, { a: 1, b: 2 }), ok);
  assert.deepEqual(checkBody(params, { b: 2, d: 4, e: 5 }), { unknown: ["d", "e"], missing: ["a"] });
  assert.deepEqual(checkBody(params, {}), { unknown: [], missing: ["a"] });
  assert.deepEqual(checkBody(p([], []), {}), ok);
  assert.deepEqual(checkBody(p([], []), { a: 1 }), { unknown: ["a"], missing: [] });
});

test("one parameter: a non-empty body without its key is the whole argument", () => {
  const params = p(["inputs"], ["inputs"]);
  assert.deepEqual(checkBody(params, { a: 1, b: 2 }), ok);
  assert.deepEqual(checkBody(params, { inputs: 5 }), ok);
  assert.deepEqual(checkBody(params, { inputs: 5, other: 1 }), { unknown: ["other"], missing: [] });
  assert.deepEqual(checkBody(params, {}), { unknown: [], missing: ["inputs"] });
  // **kwargs turns the rule off: keys bind by name.
  assert.deepEqual(checkBody(p(["inputs"], ["inputs"], true), { a: 1 }), {
    unknown: [],
    missing: ["inputs"],
  });
});

test("context: never from the body unless **kwargs without a context parameter takes it", () => {
  assert.deepEqual(checkBody(p(["a"], [], false, true), { context: 1, a: 1 }), {
    unknown: ["context"],
    missing: [],
  });
  assert.deepEqual(checkBody(p(["a"], [], true, true), { context: 1 }), {
    unknown: ["context"],
    missing: [],
  });
  assert.deepEqual(checkBody(p(["a"], [], true, false), { context: 1 }), ok);
  assert.deepEqual(checkBody(p(["a"], ["a"], true, false), { z: 1 }), { unknown: [], missing: ["a"] });
});

test("callback_url: dropped unless the handler takes it or **kwargs", () => {
  assert.deepEqual(checkBody(p(["a", "b"], ["a"]), { a: 1, callback_url: "http://x" }), ok);
  assert.deepEqual(checkBody(p(["a", "callback_url"], ["a"]), { a: 1, callback_url: "http://x" }), ok);
  // Dropped before the one-parameter rule: only callback_url leaves an empty body.
  assert.deepEqual(checkBody(p(["x"], ["x"]), { callback_url: "http://x" }), { unknown: [], missing: ["x"] });
  assert.deepEqual(checkBody(p(["x"], ["x"]), { callback_url: "http://x", y: 1 }), ok);
});

test("describeBodyMismatch says what is wrong in one line", () => {
  assert.equal(
    describeBodyMismatch({ unknown: ["z"], missing: ["a", "b"] }),
    "the handler does not accept the key 'z' and needs the keys 'a', 'b'",
  );
});
