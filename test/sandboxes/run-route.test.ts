// exec in one round trip: POST /sandboxes/{id}/processes/run streams the
// started process, its output and its exit code as frames
// (coordinator/sandboxes/process-run.ts), from the agent's RunProcess
// (ProcessTable.runProcess) through the sandbox service, with fake agents.

import assert from "node:assert/strict";
import { test } from "node:test";
import { gatewaySandboxRoutes } from "../../coordinator/sandboxes/routes.ts";
import { RUN_CONTENT_TYPE, RunFrame } from "../../coordinator/sandboxes/process-run.ts";
import { gatewayScope } from "../../coordinator/http/scopes.ts";
import { ProcessTable } from "../../agent/sandboxes/processes.ts";
import type { ExecSession, ProcessRunEvent } from "../../api/index.ts";
import { OutputQueue } from "../../agent/host/exec.ts";
import { sandboxWorld } from "./fakes.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { bearer } from "../helpers/auth.ts";
import { waitUntil } from "../helpers/wait.ts";

function frames(body: Buffer): { kind: string; payload: Buffer }[] {
  const out: { kind: string; payload: Buffer }[] = [];
  for (let at = 0; at < body.length; ) {
    const size = body.readUInt32BE(at + 1);
    out.push({
      kind: String.fromCharCode(body[at] as number),
      payload: body.subarray(at + 5, at + 5 + size),
    });
    at += 5 + size;
  }
  return out;
}

test("POST .../processes/run: started, stdout and stderr in order, exit code; refusals are plain errors", async (t) => {
  const w = await sandboxWorld(t);
  const agent = w.addAgent("agent-a");
  const app = routesApp();
  await app.register(gatewayScope(w.store.tokens, gatewaySandboxRoutes(w.svc)));
  t.after(() => app.close());
  const token = (await w.store.tokens.create(w.ws)).secret;
  const other = (await w.store.tokens.create(w.otherWs)).secret;
  const post = (url: string, payload: object, tok = token) =>
    app.inject({ method: "POST", url: `/api/v1/gateway${url}`, headers: bearer(tok), payload });
  const id = (await post("/sandboxes", { stub_id: (await w.stub("sb", "sandbox")).id })).json()
    .sandbox_id as string;

  const running = post(`/sandboxes/${id}/processes/run`, { args: ["python3", "-c", "..."], cwd: "/tmp" });
  await waitUntil(() => agent.execs.length === 1, { what: "the agent's exec" });
  const e = agent.execs[0];
  assert.ok(e);
  e.write("stdout", "one\n");
  e.write("stderr", "oops\n");
  e.write("stdout", "two\n");
  e.finish(3);
  const r = await running;
  assert.equal(r.statusCode, 200);
  assert.equal(r.headers["content-type"], RUN_CONTENT_TYPE);
  const got = frames(r.rawPayload);
  assert.equal(got[0]?.kind, "P");
  const started = JSON.parse(String(got[0]?.payload));
  assert.deepEqual([started.pid, started.cwd, started.status], [1, "/tmp", "running"]);
  const text = (kind: string) =>
    got
      .filter((f) => f.kind === kind)
      .map((f) => String(f.payload))
      .join("");
  assert.equal(text("O"), "one\ntwo\n");
  assert.equal(text("E"), "oops\n");
  assert.deepEqual(got.at(-1)?.kind, "X");
  assert.deepEqual(JSON.parse(String(got.at(-1)?.payload)), { exit_code: 3, status: "exited" });
  assert.equal(RunFrame.exit, "X".charCodeAt(0));

  // The process is the sandbox's like any other: the ordinary routes know it.
  const status = await app.inject({
    method: "GET",
    url: `/api/v1/gateway/sandboxes/${id}/processes/1`,
    headers: bearer(token),
  });
  assert.deepEqual([status.json().exit_code, status.json().status], [3, "exited"]);

  // Refusals before anything starts are ordinary errors with their status.
  const bad = await post(`/sandboxes/${id}/processes/run`, { args: [] });
  assert.equal(bad.statusCode, 400);
  const foreign = await post(`/sandboxes/${id}/processes/run`, { args: ["true"] }, other);
  assert.deepEqual([foreign.statusCode, foreign.json().error.code], [404, "not_found"]);
  assert.equal(agent.execs.length, 1, "nothing was started for a refused run");
});

test("ProcessTable.runProcess: a reader that leaves early stops the stream, not the process", async () => {
  const sessions: { out: OutputQueue; exit: (code: number) => void }[] = [];
  const table = new ProcessTable({
    exec: async (): Promise<ExecSession> => {
      const out = new OutputQueue(1);
      let exit!: (code: number) => void;
      const exited = new Promise<number>((r) => {
        exit = r;
      });
      sessions.push({ out, exit });
      return { output: out, exit: exited, writeStdin: () => {}, closeStdin: () => {}, kill: () => {} };
    },
  });
  const events: ProcessRunEvent[] = [];
  const run = table.runProcess("c1", { args: ["sleep", "1"] });
  for await (const ev of run) {
    events.push(ev);
    if (ev.type === "started") sessions[0]?.out.push({ stream: "stdout", data: Buffer.from("x") });
    if (ev.type === "output") break;
  }
  assert.deepEqual(
    events.map((e) => e.type),
    ["started", "output"],
  );
  assert.equal((await table.getProcess("c1", 1)).status, "running");
  sessions[0]?.out.end();
  sessions[0]?.exit(0);
  assert.equal((await table.waitProcess("c1", 1)).exitCode, 0);
});
