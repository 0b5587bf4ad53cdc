// Deployments end to end, against a real `berth up` cluster: an endpoint
// deployed with `berth deploy` and called with curl; 50 concurrent requests
// against max_containers=3; containers gone after keep-warm; a `*/1` schedule
// firing every minute; a task queue whose signed callbacks arrive; `berth
// serve` picking up an edited handler; stop/start; bad input.

import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { promisify } from "node:util";
import { freePort, waitFor } from "../../shared/net.ts";
import { type BerthUp, CLI_BIN, UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const execp = promisify(execFile);

const app = (callback: string) => `
import os, time
from berth import QueueDepthAutoscaler, endpoint, schedule, task_queue

@endpoint(name="hello", cpu=0.25, memory=128, keep_warm_seconds=5,
          autoscaler=QueueDepthAutoscaler(max_containers=3, tasks_per_container=1))
def hello(name: str = "world", nap: float = 0, context=None):
    time.sleep(nap)
    return {"hello": name, "container": context.container_id, "task": context.task_id}

@endpoint(name="boom", cpu=0.25, memory=128, keep_warm_seconds=5)
def boom(x: int):
    raise ValueError(f"cannot take {x}")

@task_queue(name="jobs", cpu=0.25, memory=128, keep_warm_seconds=5, callback_url="${callback}")
def job(x: int):
    return {"double": 2 * x}

@schedule(when="*/1 * * * *", name="minutely", cpu=0.25, memory=128, callback_url="${callback}")
def tick():
    return {"tick": time.time()}
`;
import { bearer } from "../helpers/auth.ts";

interface Callback {
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

async function callbackReceiver(td: Teardown) {
  const got: Callback[] = [];
  const port = await freePort();
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      got.push({ headers: req.headers, body });
      res.end("ok");
    });
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  td.defer(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${port}/cb`, got };
}

function verifies(cb: Callback, signatureToken: string): boolean {
  const ts = String(cb.headers["x-task-timestamp"]);
  const expected = createHmac("sha256", signatureToken)
    .update(`${Buffer.from(cb.body).toString("base64")}:${ts}`)
    .digest("hex");
  return expected === cb.headers["x-task-signature"];
}

async function deploymentOf(up: BerthUp, ws: string, name: string) {
  const r = await up.api(`/api/v1/deployment/${ws}?name=${name}`);
  assert.equal(r.status, 200);
  const list = ((await r.json()) as { deployments: { id: string; version: number; active: boolean }[] })
    .deployments;
  assert.ok(list.length > 0, `no deployment named ${name}`);
  return list[0] as { id: string; version: number; active: boolean };
}

async function containersOf(up: BerthUp, ws: string, id: string): Promise<number> {
  const r = await up.api(`/api/v1/deployment/${ws}/${id}`);
  return ((await r.json()) as { containers: number }).containers;
}

test("deployments end to end on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "curl"] })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const receiver = await callbackReceiver(td);
  writeFileSync(join(up.appDir, "app.py"), app(receiver.url));
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;
  const sigToken = (
    (await (await up.api("/api/v1/workspace/current/signature-token")).json()) as { signature_token: string }
  ).signature_token;

  const deploy = async (target: string) => {
    const r = await up.cli(["deploy", target]);
    assert.equal(r.code, 0, `berth deploy ${target}: ${r.stdout}\n${r.stderr}\n${up.output()}`);
    return r.stdout;
  };
  // The schedule first: its ticks arrive while the rest runs.
  const scheduleDeployedAt = Date.now();
  await deploy("app.py:tick");

  await t.test("berth deploy prints the URL; curl gets the handler's JSON and a task id", async () => {
    const out = await deploy("app.py:hello");
    const url = /(https?:\/\/\S+\/endpoint\/hello)\b/.exec(out)?.[1];
    assert.ok(url, out);
    const { stdout } = await execp("curl", [
      ...["-sS", "-i", "-X", "POST", url as string],
      ...["-H", `Authorization: Bearer ${up.token}`, "-H", "Content-Type: application/json"],
      ...["-d", '{"name": "curl"}', "--max-time", "180"],
    ]);
    assert.match(stdout, /^HTTP\/1\.1 200/);
    const taskId = /x-task-id:\s*(\S+)/i.exec(stdout)?.[1];
    assert.ok(taskId, stdout);
    const body = JSON.parse(stdout.slice(stdout.indexOf("\r\n\r\n") + 4));
    assert.equal(body.hello, "curl");
    assert.equal(body.task, taskId);
    const task = (await (await up.api(`/v2/task/${taskId}/`)).json()) as { status: string };
    assert.equal(task.status, "COMPLETE");
  });

  await t.test("bad input: not JSON, unknown keys, no token, unknown endpoint, handler error", async () => {
    const post = (path: string, body: string, auth = true) =>
      fetch(`${up.url}${path}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(auth ? bearer(up.token) : {}),
        },
        body,
      });
    let r = await post("/endpoint/hello", "not json");
    assert.equal(r.status, 400);
    r = await post("/endpoint/hello", '{"name": "x", "colour": "red"}');
    assert.equal(r.status, 400);
    assert.match(await r.text(), /colour/);
    r = await post("/endpoint/hello", "{}", false);
    assert.equal(r.status, 401);
    r = await post("/endpoint/nope", "{}");
    assert.equal(r.status, 404);
    await deploy("app.py:boom");
    r = await post("/endpoint/boom", '{"x": 7}');
    assert.equal(r.status, 500);
    const taskId = r.headers.get("x-task-id");
    const text = await r.text();
    assert.match(text, /cannot take 7/);
    assert.ok(taskId && text.includes(taskId), text);
    const task = (await (await up.api(`/v2/task/${taskId}/`)).json()) as { status: string };
    assert.equal(task.status, "FAILED");
  });

  await t.test(
    "50 concurrent requests against max_containers=3 use at most 3 containers and all return",
    async () => {
      const dep = await deploymentOf(up, ws, "hello");
      let most = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          most = Math.max(most, await containersOf(up, ws, dep.id));
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      const answers = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          fetch(`${up.url}/endpoint/hello`, {
            method: "POST",
            headers: { "content-type": "application/json", ...bearer(up.token) },
            body: JSON.stringify({ name: `n${i}`, nap: 0.2 }),
          }).then(async (r) => ({
            status: r.status,
            body: (await r.json()) as { hello: string; container: string },
          })),
        ),
      );
      sampling = false;
      await sampler;
      assert.deepEqual(
        answers.map((a) => a.status),
        Array(50).fill(200),
      );
      assert.deepEqual(
        answers.map((a) => a.body.hello),
        answers.map((_, i) => `n${i}`),
      );
      const containers = new Set(answers.map((a) => a.body.container));
      assert.ok(containers.size <= 3, `${containers.size} containers served`);
      assert.ok(most <= 3, `the deployment had ${most} containers`);

      // keep_warm_seconds=5: once idle, every container of the deployment stops.
      await waitFor(async () => (await containersOf(up, ws, dep.id)) === 0, {
        timeoutMs: 90_000,
        what: "the endpoint's containers to stop after keep-warm",
      });
      const detail = (await (await up.api(`/api/v1/deployment/${ws}/${dep.id}`)).json()) as {
        events: { from: number; to: number }[];
      };
      assert.ok(detail.events.some((e) => e.to > e.from) && detail.events.some((e) => e.to < e.from));
    },
  );

  await t.test("stop answers 409, start serves again, redeploy makes version 2", async () => {
    const dep = await deploymentOf(up, ws, "hello");
    let r = await up.cli(["deployment", "stop", dep.id]);
    assert.equal(r.code, 0, r.stderr);
    const call = () =>
      fetch(`${up.url}/endpoint/hello`, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearer(up.token) },
        body: "{}",
      });
    assert.equal((await call()).status, 409);
    r = await up.cli(["deployment", "start", dep.id]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((await call()).status, 200);
    await deploy("app.py:hello");
    assert.equal((await deploymentOf(up, ws, "hello")).version, dep.version + 1);
    const v1 = await fetch(`${up.url}/endpoint/hello/v${dep.version}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer(up.token) },
      body: '{"name": "old"}',
    });
    assert.equal(v1.status, 200);
    const list = await up.cli(["deployment", "list"]);
    assert.match(list.stdout, /hello/);
  });

  await t.test("a task queue's tasks complete and their signed callbacks arrive and verify", async () => {
    await deploy("app.py:job");
    const r = await fetch(`${up.url}/taskqueue/jobs`, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearer(up.token) },
      body: '{"x": 21}',
    });
    assert.equal(r.status, 200);
    const taskId = ((await r.json()) as { task_id: string }).task_id;
    await waitFor(() => receiver.got.some((c) => c.headers["x-task-id"] === taskId), {
      timeoutMs: 180_000,
      what: "the task queue's callback",
    });
    const cb = receiver.got.find((c) => c.headers["x-task-id"] === taskId) as Callback;
    assert.equal(cb.headers["x-task-status"], "COMPLETE");
    assert.deepEqual(JSON.parse(cb.body).data, { double: 42 });
    assert.ok(verifies(cb, sigToken), "the callback signature verifies");
  });

  await t.test(
    "a webhook on task.* gets signed CloudEvents of a task; the events history has them",
    async () => {
      const hook = await up.api(`/api/v1/webhook/${ws}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ url: receiver.url, event_types: ["task.*"], description: "e2e" }),
      });
      assert.equal(hook.status, 201);
      const secret = ((await hook.json()) as { signing_secret: string }).signing_secret;
      assert.match(secret, /^whsec_/);
      const r = await fetch(`${up.url}/taskqueue/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearer(up.token) },
        body: '{"x": 5}',
      });
      const taskId = ((await r.json()) as { task_id: string }).task_id;
      const delivered = () =>
        receiver.got.filter(
          (c) => c.headers["x-service-event"] === "task.complete" && JSON.parse(c.body).subject === taskId,
        );
      await waitFor(() => delivered().length > 0, { timeoutMs: 120_000, what: "the task.complete delivery" });
      const d = delivered()[0] as Callback;
      assert.equal(d.headers["content-type"], "application/cloudevents+json");
      const expected = `sha256=${createHmac("sha256", secret).update(d.body).digest("hex")}`;
      assert.equal(d.headers["x-service-signature"], expected);
      const ce = JSON.parse(d.body) as { specversion: string; id: string; type: string };
      assert.equal(ce.specversion, "1.0");
      assert.equal(d.headers["x-service-delivery"], ce.id);
      const history = (await (
        await up.api(`/api/v1/events/${ws}/history?type=task.*&limit=1000`)
      ).json()) as {
        events: { id: string; type: string; subject: string }[];
      };
      const mine = history.events.filter((e) => e.subject === taskId).map((e) => e.type);
      assert.deepEqual(mine.slice(0, 1), ["task.created"]);
      assert.ok(mine.includes("task.complete"), mine.join(" "));
      assert.ok(history.events.some((e) => e.id === ce.id));
    },
  );

  await t.test(
    "berth serve picks up an edited handler within seconds and leaves nothing running",
    async () => {
      writeFileSync(join(up.appDir, "dev.py"), devApp("one"));
      const serve = spawn(process.execPath, [CLI_BIN, "serve", "dev.py:dev"], {
        cwd: up.appDir,
        env: up.env,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      for (const s of [serve.stdout, serve.stderr])
        createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
      const exited = new Promise<number | null>((r) => serve.once("exit", (c) => r(c)));
      td.defer(async () => {
        if (serve.exitCode === null) serve.kill("SIGKILL");
        await exited;
      });
      await waitFor(() => /https?:\/\/\S+\/endpoint\/\S+/.test(out), {
        timeoutMs: 120_000,
        what: "berth serve's URL",
      });
      const url = /(https?:\/\/\S+\/endpoint\/\S+)/.exec(out)?.[1] as string;
      const ask = async () => {
        const r = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json", ...bearer(up.token) },
          body: "{}",
        });
        return r.ok ? ((await r.json()) as { version: string }).version : `status ${r.status}`;
      };
      await waitFor(async () => (await ask()) === "one", {
        timeoutMs: 180_000,
        what: "the first served answer",
      });
      writeFileSync(join(up.appDir, "dev.py"), devApp("two"));
      const edited = Date.now();
      await waitFor(async () => (await ask()) === "two", { timeoutMs: 60_000, what: "the edited handler" });
      t.diagnostic(`the edit was served after ${Date.now() - edited} ms`);
      await waitFor(() => out.includes("served request"), {
        timeoutMs: 30_000,
        what: "the container's log line",
      });
      serve.kill("SIGINT");
      assert.equal(await exited, 0, out);
      const list = (await (await up.api(`/api/v1/deployment/${ws}?name=dev`)).json()) as {
        deployments: unknown[];
      };
      assert.deepEqual(list.deployments, []);
    },
  );

  await t.test("the */1 schedule fires every minute and its callbacks verify", async () => {
    const ticks = () => receiver.got.filter((c) => JSON.parse(c.body).data?.tick !== undefined);
    const wait = Math.max(0, scheduleDeployedAt + 125_000 - Date.now());
    await waitFor(() => ticks().length >= 2, { timeoutMs: wait + 60_000, what: "two schedule ticks" });
    const [a, b] = ticks().map((c) => JSON.parse(c.body).data.tick as number);
    assert.ok(Math.abs((b as number) - (a as number) - 60) < 20, `ticks ${a} and ${b} are a minute apart`);
    assert.ok(ticks().every((c) => verifies(c, sigToken)));
  });
});

const devApp = (version: string) => `
from berth import endpoint

@endpoint(name="dev", cpu=0.25, memory=128)
def dev():
    print("served request", flush=True)
    return {"version": "${version}"}
`;
