// The usage tap: server-sent events split anywhere (inside an event, inside a
// UTF-8 character) come out as the same bytes, less the usage chunk when the
// gateway asked for it; usage is read from streams and JSON alike.

import assert from "node:assert/strict";
import { test } from "node:test";
import { tapFor, usageOf } from "../../coordinator/inference/usage-tap.ts";

const event = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const words = [
  event({ choices: [{ delta: { content: "größe " } }], usage: null }),
  event({ choices: [{ delta: { content: "€" } }], usage: null }),
];
const usageChunk = event({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } });
const stream = Buffer.from(words.join("") + usageChunk + "data: [DONE]\n\n");

function run(strip: boolean, cut: number[]): { out: string; usage: unknown } {
  const tap = tapFor("text/event-stream; charset=utf-8", strip);
  const outs: Buffer[] = [];
  let from = 0;
  for (const at of [...cut, stream.length]) {
    outs.push(tap.chunk(stream.subarray(from, at)));
    from = at;
  }
  outs.push(tap.end());
  return { out: Buffer.concat(outs).toString("utf8"), usage: tap.usage() };
}

test("an SSE stream cut at every byte keeps its bytes and its usage; the asked-for usage chunk is dropped", () => {
  const all = stream.toString("utf8");
  for (let i = 1; i < stream.length; i++) {
    const kept = run(false, [i]);
    assert.equal(kept.out, all, `cut at ${i}`);
    assert.deepEqual(kept.usage, { promptTokens: 3, completionTokens: 2, totalTokens: 5 });
    const stripped = run(true, [i]);
    assert.equal(stripped.out, words.join("") + "data: [DONE]\n\n", `cut at ${i}`);
    assert.deepEqual(stripped.usage, kept.usage);
  }
});

test("a complete event goes out at once; only a partial one waits", () => {
  const tap = tapFor("text/event-stream", true);
  const first = words[0] as string;
  assert.equal(tap.chunk(Buffer.from(first + 'data: {"cho')).toString(), first);
  assert.equal(
    tap.chunk(Buffer.from('ices":[]}\n\n')).toString(),
    'data: {"choices":[]}\n\n',
    "no usage: not dropped",
  );
});

test("JSON answers: usage read; names from other APIs (input/output tokens) too; none is null, not a guess", () => {
  const tap = tapFor("application/json", false);
  const body = Buffer.from(JSON.stringify({ data: [], usage: { prompt_tokens: 4, total_tokens: 4 } }));
  assert.equal(tap.chunk(body.subarray(0, 5)).length, 5);
  tap.chunk(body.subarray(5));
  assert.deepEqual(tap.usage(), { promptTokens: 4, completionTokens: null, totalTokens: 4 });
  assert.deepEqual(usageOf({ usage: { input_tokens: 2, output_tokens: 3 } }), {
    promptTokens: 2,
    completionTokens: 3,
    totalTokens: 5,
  });
  assert.equal(usageOf({ choices: [] }), undefined);
  assert.equal(tapFor("text/plain", false).usage(), undefined);
});
