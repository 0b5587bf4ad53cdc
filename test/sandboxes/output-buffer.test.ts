// The bounded output buffer: absolute offsets, trimming, resuming and following.

import assert from "node:assert/strict";
import { test } from "node:test";
import { OutputBuffer } from "../../agent/sandboxes/output-buffer.ts";

test("keeps the last capacity bytes at absolute offsets; a reader resumes from its offset", () => {
  const b = new OutputBuffer(8);
  b.append(Buffer.from("abcde"));
  assert.deepEqual([b.start, b.end], [0, 5]);
  assert.equal(b.read(2).data.toString(), "cde");
  b.append(Buffer.from("fghij"));
  assert.deepEqual([b.start, b.end], [2, 10]);
  assert.equal(b.read(0).data.toString(), "cdefghij");
  assert.equal(b.read(0).offset, 2);
  assert.equal(b.read(7).data.toString(), "hij");
  assert.equal(b.read(99).data.length, 0);
  // A chunk larger than the whole buffer keeps its tail.
  b.append(Buffer.from("0123456789AB"));
  assert.deepEqual([b.start, b.end], [14, 22]);
  assert.equal(b.read(0).data.toString(), "456789AB");
  assert.throws(() => new OutputBuffer(0), /positive integer/);
});

test("follow yields what is kept, then new bytes, until closed or aborted", async () => {
  const b = new OutputBuffer(1024);
  b.append(Buffer.from("one "));
  const got: string[] = [];
  const reading = (async () => {
    for await (const c of b.follow(0)) got.push(c.toString());
  })();
  await new Promise((r) => setImmediate(r));
  b.append(Buffer.from("two "));
  await new Promise((r) => setImmediate(r));
  b.append(Buffer.from("three"));
  b.close();
  await reading;
  assert.equal(got.join(""), "one two three");

  const open = new OutputBuffer(16);
  const ac = new AbortController();
  const followed = (async () => {
    const out: string[] = [];
    for await (const c of open.follow(0, ac.signal)) out.push(c.toString());
    return out.join("");
  })();
  open.append(Buffer.from("x"));
  await new Promise((r) => setImmediate(r));
  ac.abort();
  assert.equal(await followed, "x");
});
