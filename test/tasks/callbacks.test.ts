import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { waitFor } from "../../shared/net.ts";
import { startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "./harness.ts";

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  raw: Buffer;
}

describe("task callbacks (real NATS, local HTTP receiver)", () => {
  let h: TaskHarness;
  let base: string;
  const received: Received[] = [];
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        received.push({ path: req.url ?? "", headers: req.headers, raw: Buffer.concat(chunks) });
        res.writeHead(req.url === "/broken" ? 500 : 200).end("ok");
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    cleanups.push(() => new Promise((r) => server.close(r)));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  /** Verifies a callback exactly as the spec tells receivers to. */
  function verify(r: Received, token: string): boolean {
    const b64 = r.raw.toString("base64");
    const expected = createHmac("sha256", token)
      .update(`${b64}:${r.headers["x-task-timestamp"]}`)
      .digest("hex");
    return expected === r.headers["x-task-signature"];
  }

  test("a COMPLETE task of a stub with callback_url POSTs {data} with a valid signature", async () => {
    const config = stubConfig({ callback_url: `${base}/stub-hook` });
    const stubId = (
      await h.tasks.upsertStub(h.ws.id, { name: "cb", type: "function", config, extra: stubExtra() })
    ).stub.id;
    const [id] = await h.tasks.submit(h.ws.id, stubId, [Buffer.from("x")]);
    await h.event({ type: "started", taskId: id as string, stubId });
    await h.event({
      type: "finished",
      taskId: id as string,
      stubId,
      status: "COMPLETE",
      result: "eA==",
      resultJson: '{"answer": 49}',
    });
    const r = await waitFor(() => received.find((x) => x.headers["x-task-id"] === id), {
      what: "the callback",
    });
    assert.equal(r.path, "/stub-hook");
    assert.equal(r.headers["content-type"], "application/json");
    assert.equal(r.headers["x-task-status"], "COMPLETE");
    const task = await h.tasks.getTask(h.ws.id, id as string);
    assert.equal(r.headers["x-task-timestamp"], String(Math.floor(Date.parse(task.createdAt) / 1000)));
    assert.deepEqual(JSON.parse(r.raw.toString()), { data: { answer: 49 } });
    const token = await h.store.workspaces.signatureToken(h.ws.id);
    assert.ok(verify(r, token), "signature verifies with the workspace's signature token");
    assert.ok(!verify(r, `${token}x`), "and not with another token");
  });

  test("a per-task callback_url overrides the stub's; a failure sends data null and the error", async () => {
    const stubId = (
      await h.tasks.upsertStub(h.ws.id, {
        name: "cb2",
        type: "function",
        config: stubConfig(),
        extra: stubExtra(),
      })
    ).stub.id;
    const [id] = await h.tasks.submit(h.ws.id, stubId, [Buffer.from("x")], {
      callbackUrl: `${base}/per-task`,
    });
    const error = { type: "ValueError", message: "bad", traceback: "tb" };
    await h.event({ type: "started", taskId: id as string, stubId });
    await h.event({ type: "finished", taskId: id as string, stubId, status: "FAILED", error });
    const r = await waitFor(() => received.find((x) => x.headers["x-task-id"] === id), {
      what: "the callback",
    });
    assert.equal(r.path, "/per-task");
    assert.equal(r.headers["x-task-status"], "FAILED");
    assert.deepEqual(JSON.parse(r.raw.toString()), { data: null, error });
    assert.ok(verify(r, await h.store.workspaces.signatureToken(h.ws.id)));
  });

  test("no callback_url: nothing is sent; a receiver answering 500 does not disturb the task", async () => {
    const stubId = (
      await h.tasks.upsertStub(h.ws.id, {
        name: "cb3",
        type: "function",
        config: stubConfig(),
        extra: stubExtra(),
      })
    ).stub.id;
    const [quiet, broken] = await h.tasks.submit(h.ws.id, stubId, [Buffer.from("x")]);
    const [b] = await h.tasks.submit(h.ws.id, stubId, [Buffer.from("y")], { callbackUrl: `${base}/broken` });
    for (const id of [quiet, b] as string[]) {
      await h.event({ type: "started", taskId: id, stubId });
      await h.event({ type: "finished", taskId: id, stubId, status: "COMPLETE", result: "eA==" });
    }
    await waitFor(() => received.some((x) => x.headers["x-task-id"] === b), { what: "the broken callback" });
    assert.equal((await h.tasks.getTask(h.ws.id, b as string)).status, "COMPLETE");
    assert.ok(!received.some((x) => x.headers["x-task-id"] === quiet));
    assert.equal(broken, undefined);
  });
});
