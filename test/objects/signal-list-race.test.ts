// GET /api/v1/signal/{ws} never answered when a signal was set or cleared
// while it listed (found by the route fuzzer): kv.keys() waited for a
// "0 pending" delivery that a subject rewritten under it never brings. The
// list now reads the stream's subject list; this drives list, set and clear
// at once, many times, and every list must answer.

import assert from "node:assert/strict";
import { test } from "node:test";
import { SignalStore } from "../../coordinator/state/signals.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";

// The timeout is the suite's safety net for the hang this guards against, not a timing assertion.
test("signal list answers while signals are set and cleared concurrently", {
  timeout: 120_000,
}, async (t) => {
  const nats = await startTestNats(t);
  const nc = await connectTestNats(t, nats, "coordinator");
  const signals = new SignalStore(nc);
  await signals.set("ws-a", "steady", 600);
  for (let i = 0; i < 150; i++) {
    const [listed] = await Promise.all([
      signals.list("ws-a"),
      signals.set("ws-a", "flapping", 60),
      signals.clear("ws-a", "flapping"),
      signals.set("ws-b", "other", 60),
    ]);
    assert.ok(
      listed.some((s) => s.name === "steady"),
      `round ${i}: the steady signal is listed`,
    );
    assert.ok(
      listed.every((s) => s.set),
      "only set signals are listed",
    );
  }
  // Cleared signals are not listed; another workspace's never are.
  await signals.clear("ws-a", "flapping");
  assert.deepEqual(
    (await signals.list("ws-a")).map((s) => s.name),
    ["steady"],
  );
});
