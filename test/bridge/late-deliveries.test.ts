// Every message a pull's request brings reaches a runner; none waits out
// the ack wait (30 s) on a pull the agent was already done with. First
// against real JetStream through the task bridge (a Node client in place of
// a runner); then the server's side of the race that stalled `.map()`
// scripted, so that it happens every time: while a no-wait pull is served,
// the last queued message says none is pending and tasks published just
// after still go to the same request.

import assert from "node:assert/strict";
import { test } from "node:test";
import { createServer, type Socket, connect as tcpConnect } from "node:net";
import { connect, headers, type Msg, type NatsConnection } from "nats";
import { closeNats } from "../../shared/nats-server.ts";
import { pullQueued } from "../../agent/tasks/pulls.ts";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import type { Slot, TaskAssignment } from "../../agent/tasks/types.ts";
import { TaskHeaders, TASKS_STREAM, stubConsumerName } from "../../shared/tasks.ts";
import { tempDir } from "../helpers/env.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";
import { post, publishTask, queueEmpty, runnerOpener, startTaskNats } from "./helpers.ts";

interface Answer {
  tasks?: TaskAssignment[];
}

const ok = (id: string) => ({ id, status: "COMPLETE", result: Buffer.from(id).toString("base64") });
const idsOf = (r: { body: unknown }) => ((r.body as Answer).tasks ?? []).map((x) => x.id);

test("tasks queued after a batch's no-wait pull reach the next ask", { timeout: 60_000 }, async (t) => {
  const n = await startTaskNats(t);
  const dir = tempDir(t, "berth-bridge-late-");
  // A task lost to a finished pull comes back only after the ack wait (30 s): far past one pull wait.
  const runners = new TaskRunners({
    kill: async () => {},
    worker: { pullWaitMs: 1500, workingIntervalMs: 200 },
  });
  t.after(() => runners.stop());
  await runners.attach(n.agent, "agent-late-test");
  const openRunner = runnerOpener(runners, dir, "ctr-l");
  const r = await openRunner("stub-late");

  // Two queued: the waiting pull takes the first, a no-wait pull for up to 3 more finds one.
  for (const id of ["task-l0", "task-l1"]) await publishTask(n, { stubId: "stub-late", taskId: id });
  const first = await post(r.socket, "/v1/tasks/next", { max: 4 });
  assert.deepEqual(idsOf(first), ["task-l0", "task-l1"]);

  // Queued once that pull had answered: the server may still owe its request two messages.
  const later = ["task-l2", "task-l3", "task-l4"];
  for (const id of later) await publishTask(n, { stubId: "stub-late", taskId: id });
  const got: string[] = [];
  let results = [ok("task-l0"), ok("task-l1")];
  for (;;) {
    const answer = await post(r.socket, "/v1/tasks/results", { results, next: { max: 4 } });
    const ids = idsOf(answer);
    // An empty answer: a whole pull wait went by with none of them.
    if (ids.length === 0) break;
    got.push(...ids);
    results = ids.map(ok);
    if (got.length >= later.length) break;
  }
  assert.deepEqual(got, later, "every task queued later is handed out at the next asks");
  await post(r.socket, "/v1/tasks/results", { results });
  await queueEmpty(n);
  await runners.close(r.containerId);
});

/**
 * Stands in for JetStream's side of one stub's consumer (no stream behind
 * it): answers each pull request the way the server does when tasks are
 * published while it serves a no-wait request, as `script` says.
 */
function scriptedConsumer(
  nc: NatsConnection,
  replies: string[],
  stubId: string,
  script: (send: (taskId: string, pending: number) => void, status: (code: number) => void) => Promise<void>,
): void {
  let seq = 0;
  nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.${TASKS_STREAM}.${stubConsumerName(stubId)}`, {
    callback: (_err, req: Msg) => {
      const reply = req.reply as string;
      replies.push(reply);
      const send = (taskId: string, pending: number) => {
        seq++;
        const h = headers();
        h.set(TaskHeaders.taskId, taskId);
        // To the request's inbox, as JetStream sends it (the proxy makes the reply `$JS.ACK...`).
        nc.publish(reply, Buffer.from(taskId), {
          headers: h,
          reply: `${FAKE_ACK}${TASKS_STREAM}.${stubConsumerName(stubId)}.1.${seq}.${seq}.${Date.now()}000000.${pending}`,
        });
      };
      const status = (code: number) => {
        const h = headers(code, code === 404 ? "No Messages" : "Request Timeout");
        nc.publish(reply, new Uint8Array(), { headers: h });
      };
      void script(send, status);
    },
  });
}

test("a no-wait pull takes what the server sends it after a message said none was pending", {
  timeout: 60_000,
}, async (t) => {
  const nats = await startTestNats(t);
  const server = await connectTestNats(t, nats, "coordinator");
  const agent = await connect({
    servers: await ackRewritingProxy(t, nats.port),
    user: nats.coordinator.user,
    pass: nats.coordinator.password,
    // An agent's NATS user may subscribe only under its own inbox prefix.
    inboxPrefix: "_INBOX_agent-scripted",
  });
  t.after(() => closeNats(agent));
  const slot = { stubId: "stub-scripted", containerId: "ctr-s1" } as Slot;
  const log = { info() {}, warn() {}, error() {} };
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const replies: string[] = [];
  t.after(() =>
    assert.ok(
      replies.length > 0 && replies.every((r) => r.startsWith("_INBOX_agent-scripted.")),
      `pulls use the connection's inbox prefix: ${replies.join(", ")}`,
    ),
  );

  await t.test("tasks published as it is served fill the request", async () => {
    // The one queued task says none is pending; two published just after still go to this request.
    scriptedConsumer(server, replies, "stub-scripted", async (send) => {
      send("task-s0", 0);
      await pause(100);
      send("task-s1", 0);
      send("task-s2", 0);
    });
    await server.flush();
    const msgs = await pullQueued(agent, slot, 3, log);
    assert.deepEqual(
      msgs.map((m) => m.headers?.get(TaskHeaders.taskId)),
      ["task-s0", "task-s1", "task-s2"],
      "a message the request brought is handed out, not left to the ack wait",
    );
  });

  await t.test("the request ends with the server's status", async () => {
    const slot2 = { stubId: "stub-scripted-2", containerId: "ctr-s2" } as Slot;
    scriptedConsumer(server, replies, "stub-scripted-2", async (send, status) => {
      send("task-t0", 0);
      await pause(100);
      send("task-t1", 0);
      status(408);
    });
    await server.flush();
    const msgs = await pullQueued(agent, slot2, 5, log);
    assert.deepEqual(
      msgs.map((m) => m.headers?.get(TaskHeaders.taskId)),
      ["task-t0", "task-t1"],
    );
  });
});

// nats-server refuses a client's message with a `$JS.ACK` reply (only JetStream may send one), so
// the scripted consumer sends FAKE_ACK and a proxy in front of the puller turns it into `$JS.ACK.`.
const FAKE_ACK = "XJS.ACK.";
const REAL_ACK = "$JS.ACK.";

/** A loopback TCP proxy to the server at `port` that rewrites FAKE_ACK to `$JS.ACK.` towards the client. */
async function ackRewritingProxy(t: { after: (fn: () => unknown) => void }, port: number): Promise<string> {
  const sockets = new Set<Socket>();
  const proxy = createServer((client) => {
    const upstream = tcpConnect(port, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    client.pipe(upstream);
    // Same length, so no byte count changes; a marker split across reads is held back a read.
    let tail = "";
    upstream.on("data", (chunk: Buffer) => {
      let text = (tail + chunk.toString("latin1")).replaceAll(FAKE_ACK, REAL_ACK);
      tail = "";
      for (let k = FAKE_ACK.length - 1; k > 0; k--) {
        if (text.endsWith(FAKE_ACK.slice(0, k))) {
          tail = text.slice(-k);
          text = text.slice(0, -k);
          break;
        }
      }
      client.write(Buffer.from(text, "latin1"));
    });
    upstream.on("end", () => client.end());
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  t.after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => proxy.close(r));
  });
  const address = proxy.address();
  if (!address || typeof address === "string") throw new Error("the proxy has no port");
  return `nats://127.0.0.1:${address.port}`;
}
