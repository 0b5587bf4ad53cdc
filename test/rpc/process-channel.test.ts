// ProcessChannel: many runs on one stream between AgentRpcClient and the
// agent's gRPC server (api/grpc/process-channel.ts, agent/rpc/process-channel.ts),
// against a scripted SandboxProcessApi: runs side by side, errors as the
// catalog's, a reader leaving early, credit holding back a slow reader's
// output, a restarted server, and an agent without the channel.

import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import type { ExecRequest, ProcessInfo, ProcessRunEvent, SandboxProcessApi } from "../../api/index.ts";
import { AgentRpcClient, loadAgentProto, RUN_WINDOW } from "../../api/grpc/index.ts";
import { processHandlers } from "../../agent/rpc/process-handlers.ts";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { BerthError } from "../../shared/errors.ts";
import { tempDir } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";
import { FakeAgent } from "./fake-agent.ts";

const info = (pid: number, args: string[], exitCode = -1): ProcessInfo => ({
  pid,
  args,
  cwd: null,
  exitCode,
  status: exitCode < 0 ? "running" : "exited",
  startedAt: 1_700_000_000_000,
  ...(exitCode < 0 ? {} : { endedAt: 1_700_000_000_001 }),
});

const bytes = (s: string) => new Uint8Array(Buffer.from(s));

/** A process table whose runProcess is a script per program name. */
class ScriptedProcesses implements Partial<SandboxProcessApi> {
  runs = 0;
  aborted = 0;
  /** Output bytes handed to the transport so far, per program. */
  produced = new Map<string, number>();
  gate?: Promise<void>;

  async *runProcess(
    containerId: string,
    req: ExecRequest,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<ProcessRunEvent> {
    this.runs++;
    const name = req.args[0] as string;
    opts.signal?.addEventListener("abort", () => this.aborted++, { once: true });
    if (containerId === "missing")
      throw new BerthError("process_not_found", "no process here", { sandbox_id: "missing" });
    yield { type: "started", process: info(this.runs, req.args) };
    if (name === "echo") {
      yield { type: "output", stream: "stdout", data: bytes(`${req.args.slice(1).join(" ")}\n`) };
      yield { type: "output", stream: "stderr", data: bytes("warn\n") };
      yield { type: "ended", process: info(this.runs, req.args, 3) };
    } else if (name === "flood") {
      // 4 MiB in 64 KiB pieces, as fast as the transport takes them.
      const piece = new Uint8Array(64 * 1024).fill(0x61);
      for (let i = 0; i < 64 && !opts.signal?.aborted; i++) {
        this.produced.set(name, (this.produced.get(name) ?? 0) + piece.byteLength);
        yield { type: "output", stream: "stdout", data: piece };
      }
      yield { type: "ended", process: info(this.runs, req.args, 0) };
    } else if (name === "hang") {
      await new Promise<void>((resolve) => opts.signal?.addEventListener("abort", () => resolve()));
    } else if (name === "gated") {
      await this.gate;
      yield { type: "ended", process: info(this.runs, req.args, 0) };
    } else if (name === "short") {
      // Ends without `ended`, as an implementation stopped early does.
      yield { type: "output", stream: "stdout", data: bytes("x") };
    }
  }
}

async function collect(it: AsyncIterable<ProcessRunEvent>): Promise<ProcessRunEvent[]> {
  const out: ProcessRunEvent[] = [];
  for await (const e of it) out.push(e);
  return out;
}

const text = (e: ProcessRunEvent) => (e.type === "output" ? `${e.stream}:${Buffer.from(e.data)}` : e.type);

async function serve(t: { after: (fn: () => unknown) => void }, path: string, p: ScriptedProcesses) {
  const server = await startAgentRpcServer({
    impl: new FakeAgent(),
    processes: p as unknown as SandboxProcessApi,
    unixSocket: path,
  });
  t.after(() => server.close());
  return server;
}

function client(t: { after: (fn: () => unknown) => void }, path: string): AgentRpcClient {
  const c = new AgentRpcClient({ address: `unix://${path}` });
  t.after(() => c.close());
  return c;
}

test("runs side by side on one channel, each with its own events; errors keep their catalog code", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const p = new ScriptedProcesses();
  await serve(t, path, p);
  const c = client(t, path);

  const [a, b] = await Promise.all([
    collect(c.runProcess("sb-1", { args: ["echo", "one"] })),
    collect(c.runProcess("sb-1", { args: ["echo", "two"] })),
  ]);
  assert.deepEqual(a.map(text), ["started", "stdout:one\n", "stderr:warn\n", "ended"]);
  assert.deepEqual(b.map(text), ["started", "stdout:two\n", "stderr:warn\n", "ended"]);
  const ended = a[3];
  assert.ok(ended?.type === "ended");
  assert.deepEqual([ended.process.exitCode, ended.process.status], [3, "exited"]);

  await assert.rejects(collect(c.runProcess("missing", { args: ["echo"] })), (e: unknown) => {
    assert.ok(e instanceof BerthError);
    assert.equal(e.code, "process_not_found");
    assert.equal(e.message, "no process here");
    assert.deepEqual(e.details, { sandbox_id: "missing" });
    return true;
  });
  // A run whose events stop without `ended` ends cleanly after what it sent.
  assert.deepEqual((await collect(c.runProcess("sb-1", { args: ["short"] }))).map(text), [
    "started",
    "stdout:x",
  ]);
  // The channel is still good after a failed run.
  assert.equal((await collect(c.runProcess("sb-1", { args: ["echo", "3"] }))).length, 4);
  assert.equal(p.runs, 5);
});

test("a reader that leaves stops its run on the agent; an aborted signal ends the events quietly", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const p = new ScriptedProcesses();
  await serve(t, path, p);
  const c = client(t, path);

  for await (const e of c.runProcess("sb-1", { args: ["hang"] })) {
    assert.equal(e.type, "started");
    break;
  }
  await waitUntil(() => p.aborted === 1, { what: "the agent's run aborted after the reader left" });

  const ac = new AbortController();
  const seen: string[] = [];
  for await (const e of c.runProcess("sb-1", { args: ["hang"] }, { signal: ac.signal })) {
    seen.push(e.type);
    ac.abort();
  }
  assert.deepEqual(seen, ["started"]);
  await waitUntil(() => p.aborted === 2, { what: "the aborted run stopped on the agent" });
});

test("credit: a reader that stops holds back its run's output at one window, not the other runs", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const p = new ScriptedProcesses();
  await serve(t, path, p);
  const c = client(t, path);

  const flood = c.runProcess("sb-1", { args: ["flood"] })[Symbol.asyncIterator]();
  assert.equal((await flood.next()).value?.type, "started");
  // Not reading: the agent sends one window and waits.
  await waitUntil(() => (p.produced.get("flood") ?? 0) >= RUN_WINDOW, { what: "a window of output sent" });
  await new Promise((r) => setTimeout(r, 200));
  const held = p.produced.get("flood") ?? 0;
  assert.ok(
    held <= RUN_WINDOW + 128 * 1024,
    `the agent ran ${held} bytes ahead of a reader that read nothing`,
  );
  // Another run on the same channel is not held back.
  assert.equal((await collect(c.runProcess("sb-1", { args: ["echo", "meanwhile"] }))).length, 4);

  let read = 0;
  for (;;) {
    const n = await flood.next();
    if (n.done) break;
    if (n.value.type === "output") read += n.value.data.byteLength;
  }
  assert.equal(read, 64 * 64 * 1024);
});

test("an idle channel does not hold up a stopping agent; a run after it stopped fails as unavailable", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const p = new ScriptedProcesses();
  const server = await serve(t, path, p);
  const c = client(t, path);
  assert.equal((await collect(c.runProcess("sb-1", { args: ["echo", "x"] }))).length, 4);
  const started = Date.now();
  await server.close();
  // Graceful: the channel ended at once instead of being cut at the 5 s grace.
  assert.ok(Date.now() - started < 4000, `the server took ${Date.now() - started} ms to stop`);
  await assert.rejects(
    collect(c.runProcess("sb-1", { args: ["echo", "late"] })),
    (e: unknown) => e instanceof BerthError && e.code === "unavailable",
  );
});

test("a closed client's runs in flight finish on its channel", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const p = new ScriptedProcesses();
  let open = () => {};
  p.gate = new Promise((r) => {
    open = r;
  });
  await serve(t, path, p);
  const c = new AgentRpcClient({ address: `unix://${path}` });
  const run = collect(c.runProcess("sb-1", { args: ["gated"] }));
  await waitUntil(() => p.runs === 1, { what: "the run started" });
  c.close();
  open();
  assert.deepEqual((await run).map(text), ["started", "ended"]);
  assert.equal(p.aborted, 0);

  // A reader that leaves a closed client's run: the stream, which can say nothing more, goes with it.
  const later = new AgentRpcClient({ address: `unix://${path}` });
  const hanging = later.runProcess("sb-1", { args: ["hang"] })[Symbol.asyncIterator]();
  assert.equal((await hanging.next()).value?.type, "started");
  later.close();
  await hanging.return?.(undefined);
  await waitUntil(() => p.aborted === 1, { what: "the left run stopped on the agent" });
});

test("a restarted agent fails the runs on the old channel; the next run opens a new one", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const p = new ScriptedProcesses();
  const first = await serve(t, path, p);
  const c = client(t, path);

  const hanging = assert.rejects(
    collect(c.runProcess("sb-1", { args: ["hang"] })),
    (e: unknown) => e instanceof BerthError && e.code === "unavailable",
  );
  await waitUntil(() => p.runs === 1, { what: "the run started" });
  // A stopping agent lets its runs finish within its grace, then ends the channel.
  await first.close();
  await hanging;

  await serve(t, path, p);
  assert.deepEqual((await collect(c.runProcess("sb-1", { args: ["echo", "again"] }))).map(text), [
    "started",
    "stdout:again\n",
    "stderr:warn\n",
    "ended",
  ]);
});

test("an agent without the channel: runs go by RunProcess calls", async (t) => {
  const path = join(tempDir(t), "agent.sock");
  const p = new ScriptedProcesses();
  // An agent from before the channel: its service has every process call but ProcessChannel.
  const server = new grpc.Server();
  const handlers = processHandlers(p as unknown as SandboxProcessApi, () => {});
  delete handlers.ProcessChannel;
  server.addService(loadAgentProto().service, handlers);
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix://${path}`, grpc.ServerCredentials.createInsecure(), (e) =>
      e ? reject(e) : resolve(),
    ),
  );
  t.after(() => server.forceShutdown());
  const c = client(t, path);

  for (const word of ["first", "second"]) {
    assert.deepEqual((await collect(c.runProcess("sb-1", { args: ["echo", word] }))).map(text), [
      "started",
      `stdout:${word}\n`,
      "stderr:warn\n",
      "ended",
    ]);
  }
  assert.equal(p.runs, 2);
});
