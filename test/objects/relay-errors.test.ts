// The relay router's answers to failures (coordinator/streams/relay-router.ts),
// as an agent reads them: on a real nats-server, the agent's own clients
// (StateRelayClient, OutputRelayClient) as the restricted `agent` user ask a
// router whose handlers throw. An internal error reaches the container as
// the catalog's message with an error id, and only the log has the detail
// (under the same id); a BerthError keeps its code and message; a request the
// wire refuses, or an op no area serves, is told so.

import assert from "node:assert/strict";
import { headers } from "nats";
import { beforeEach, describe, test } from "node:test";
import { OutputRelayClient } from "../../agent/bridge/output-relay.ts";
import { StateRelayClient } from "../../agent/bridge/state-relay.ts";
import { RelayRouter } from "../../coordinator/streams/relay-router.ts";
import { BerthError } from "../../shared/errors.ts";
import { stateSubjects } from "../../shared/objects.ts";
import { OUTPUT_HEADERS, outputSubjects } from "../../shared/outputs.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";
import { perSuite } from "../helpers/suite.ts";

const SECRET = "connection to 10.0.0.7:5432 refused by pg_hba.conf";

interface Logged {
  obj: { err?: unknown; errorId?: string; subject?: string; op?: string };
  msg: string;
}

async function start(t: { after: (fn: () => unknown) => void }) {
  const nats = await startTestNats(t);
  const coordNc = await connectTestNats(t, nats, "coordinator");
  const agentNc = await connectTestNats(t, nats, "agent");
  const logged: Logged[] = [];
  const router = new RelayRouter(coordNc, { error: (obj, msg) => logged.push({ obj, msg }) });
  router.serve("queue.put", async () => {
    throw new Error(SECRET);
  });
  router.serve("queue.size", async () => {
    throw new BerthError("limit_exceeded", "the workspace holds 10 queue items, its limit");
  });
  router.serve("queue.pop", async (c) => ({ value: null, workspace: c.workspaceId }));
  router.serve("output.stat", async () => {
    throw new TypeError(SECRET);
  });
  router.start();
  t.after(() => router.stop());
  await coordNc.flush();
  return {
    agentNc,
    logged,
    state: new StateRelayClient(agentNc, "agent-1"),
    outputs: new OutputRelayClient(agentNc, "agent-1"),
  };
}

const INTERNAL = /^internal error; the server log has it under id (err-[0-9a-f]{12})$/;

describe("the relay router's errors", () => {
  const c = perSuite(start);
  beforeEach(() => {
    c.logged.length = 0;
  });

  test("an internal error: the catalog's message and an id for the container, the detail in the log", async () => {
    for (const ask of [
      () => c.state.call("ws-a", { op: "queue.put", name: "q", value: "" }),
      () => c.outputs.call("ws-a", "stat", { id: "out-1" }),
    ]) {
      c.logged.length = 0;
      const e = await ask().then(
        () => assert.fail("the call succeeded"),
        (e: unknown) => e,
      );
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "internal");
      const id = INTERNAL.exec(e.message)?.[1];
      assert.ok(id, e.message);
      assert.ok(!e.message.includes("10.0.0.7"), "the detail stays in the coordinator");
      assert.equal(c.logged.length, 1);
      const line = c.logged[0] as Logged;
      assert.equal(line.obj.errorId, id, "the log line has the same id");
      assert.match(String((line.obj.err as Error).message), /pg_hba\.conf/);
      assert.match(String(line.obj.subject), /^berth\.agent\.agent-1\.(state|output)$/);
      assert.ok(line.obj.op === "queue.put" || line.obj.op === "output.stat");
    }
  });

  test("a BerthError keeps its code and message; the answer of a served op comes back whole", async () => {
    await assert.rejects(
      c.state.call("ws-a", { op: "queue.size", name: "q" }),
      (e: unknown) =>
        e instanceof BerthError && e.code === "limit_exceeded" && /10 queue items/.test(e.message),
    );
    assert.deepEqual(await c.state.call("ws-a", { op: "queue.pop", name: "q" }), {
      value: null,
      workspace: "ws-a",
    });
    assert.deepEqual(c.logged, [], "nothing internal: nothing logged");
  });

  test("what the wire refuses, and an op no area serves here", async () => {
    await assert.rejects(
      c.state.call("ws-a", { op: "queue.drop" as "queue.put", name: "q" }),
      (e: unknown) =>
        e instanceof BerthError && e.code === "invalid_request" && /op must be one of/.test(e.message),
    );
    await assert.rejects(
      c.state.call("ws-a", { op: "map.get", name: "m", key: "k" }),
      (e: unknown) => e instanceof BerthError && e.code === "unavailable" && /map\.get/.test(e.message),
    );
    const ask = async (subject: string, data: string, h?: ReturnType<typeof headers>) =>
      JSON.parse(
        new TextDecoder().decode(
          (
            await c.agentNc.request(subject, new TextEncoder().encode(data), {
              timeout: 5000,
              ...(h ? { headers: h } : {}),
            })
          ).data,
        ),
      ) as { ok: boolean; error?: { code: string; message: string } };
    // An agent's request without its workspace is the agent's fault: internal, detail logged.
    const noWs = await ask(stateSubjects.request("agent-1"), JSON.stringify({ op: "queue.pop", name: "q" }));
    assert.equal(noWs.error?.code, "internal");
    assert.match(String(noWs.error?.message), INTERNAL);
    assert.match(String((c.logged.at(-1)?.obj.err as Error | undefined)?.message), /without workspace_id/);
    const h = headers();
    h.set(OUTPUT_HEADERS.op, "stat");
    const noOutputWs = await ask(outputSubjects.request("agent-1"), "{}", h);
    assert.deepEqual(noOutputWs.error, {
      code: "invalid_request",
      message: "a relayed output request without a workspace",
    });
    h.set(OUTPUT_HEADERS.workspace, "ws-a");
    h.set(OUTPUT_HEADERS.op, "rename");
    const badOp = await ask(outputSubjects.request("agent-1"), "{}", h);
    assert.deepEqual(badOp.error, { code: "invalid_request", message: 'unknown output operation "rename"' });
  });
});
