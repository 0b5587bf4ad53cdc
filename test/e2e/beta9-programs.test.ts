// beta9 compatibility, against one real `berth up` cluster: small programs
// in beta9's style (only the import renamed) through the real SDK — functions
// with cpu="100m" called directly (remotely) and with .local(), an endpoint
// with **inputs and a context, a realtime handler(context, data), a task
// queue whose put() result's .id is read in the task status API, a sandbox
// made with keep_warm_seconds, a pod running `python` — plus the stub.config
// of a cpu=0.5 endpoint checked field by field against the spec's table, and
// a request no host can ever place (a GPU type the fleet lacks) answered with
// the reason on every path, with `berth deploy` warning about it.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import WebSocket from "ws";
import { type BerthUp, UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";
import { checkStubConfigAgainstSpec } from "../tasks/stub-config-spec.ts";

// No GPU on a test host: any named type is one the fleet lacks.
const MISSING_GPU = "H200";

const APP = `
import json, os, sys
from berth import Pod, Sandbox, asgi, endpoint, function, realtime, task_queue

@function(cpu="100m", memory="100Mi")
def handler(x=1):
    return {"x": x, "remote": os.environ.get("BERTH_REMOTE") == "1"}

@endpoint(name="b9-predict", cpu=0.5, memory="128Mi", keep_warm_seconds=30)
def predict(context, **inputs):
    return {"inputs": inputs, "task_id": context.task_id}

@realtime(name="b9-stream", cpu="250m", memory="100Mi")
def stream(context, data):
    return {"echo": data, "stub_type": context.stub_type}

@task_queue(name="b9-jobs", cpu="250m", memory="100Mi", keep_warm_seconds=5)
def jobs(n):
    return n * 2

@function(cpu="100m", gpu="${MISSING_GPU}")
def gpu_function():
    return "never"

@endpoint(name="b9-gpu", cpu="100m", gpu="${MISSING_GPU}")
def gpu_endpoint(**inputs):
    return inputs

@asgi(name="b9-gpu-asgi", cpu="100m", gpu="${MISSING_GPU}")
def gpu_asgi():
    return None

@realtime(name="b9-gpu-rt", cpu="100m", gpu="${MISSING_GPU}")
def gpu_realtime(context, data):
    return data

@task_queue(name="b9-gpu-jobs", cpu="100m", gpu="${MISSING_GPU}")
def gpu_jobs(n):
    return n

broken_pod = Pod(name="b9-broken-pod", cpu="100m", memory="100Mi", entrypoint=["no-such-program"])

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "function":
        print("direct:", json.dumps(handler(3)))
        print("local:", json.dumps(handler.local(4)))
    elif case == "queue":
        task = jobs.put(21)
        print("task:", task.id)
        print("result:", task.result())
    elif case == "sandbox":
        sb = Sandbox(cpu="250m", memory="100Mi", keep_warm_seconds=30).create()
        r = sb.process.run_code("print(6 * 7)")
        print("sandbox:", sb.sandbox_id(), r.result.strip())
        print("terminated:", sb.terminate())
    elif case == "pod":
        p = Pod(cpu="250m", memory="100Mi", entrypoint=["python", "-c", "import time; print('pod up', flush=True); time.sleep(300)"])
        r = p.create()
        print("pod:", r.ok, r.container_id, r.error)
    elif case == "bad-pod":
        r = Pod(cpu="100m", entrypoint=["no-such-program", "--serve"]).create()
        print("bad-pod:", r.ok, json.dumps(r.error))
    elif case == "crash-pod":
        r = Pod(cpu="100m", entrypoint=["python", "-c", "import sys; print('cannot bind', flush=True); sys.exit(3)"]).create()
        print("crash-pod:", r.ok, r.code, json.dumps(r.error))
    elif case == "gpu-function":
        try:
            gpu_function()
        except Exception as e:
            print("gpu-function:", type(e).__name__, json.dumps(str(e)))
    elif case == "gpu-queue":
        task = gpu_jobs.put(1)
        print("gpu-queue:", task.id)
        try:
            task.result()
        except Exception as e:
            print("gpu-queue-error:", type(e).__name__, json.dumps(str(e)))
    elif case == "gpu-sandbox":
        try:
            Sandbox(cpu="100m", gpu="${MISSING_GPU}").create()
        except Exception as e:
            print("gpu-sandbox:", type(e).__name__, json.dumps(str(e)))
    elif case == "gpu-pod":
        r = Pod(cpu="100m", gpu="${MISSING_GPU}", entrypoint=["python", "-c", "pass"]).create()
        print("gpu-pod:", r.ok, r.code, json.dumps(r.error))
`;

/** The reason an unplaceable request must carry: the resource, the GPU type, what the fleet has. */
function assertNamesTheGpu(text: string): void {
  assert.match(text, /GPU/, text);
  assert.match(text, new RegExp(MISSING_GPU), text);
  assert.match(text, /fleet has|no agent has|agents have/i, text);
}

async function wsRoundTrip(url: string, token: string, message: string): Promise<string> {
  const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
  try {
    return await new Promise<string>((resolve, reject) => {
      ws.once("open", () => ws.send(message));
      ws.once("message", (data) => resolve(String(data)));
      ws.once("unexpected-response", (_req, res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c));
        res.on("end", () => reject(new Error(`HTTP ${res.statusCode}: ${body}`)));
      });
      ws.once("error", reject);
    });
  } finally {
    ws.terminate();
  }
}

async function post(up: BerthUp, path: string, body: unknown) {
  const r = await up.api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: r.status, text: await r.text() };
}

test("beta9-style programs run unchanged through the SDK on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);
  const py = (scenario: string) => up.python(["app.py", scenario]);
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;
  const deploy = async (target: string) => {
    const r = await up.cli(["deploy", target]);
    assert.equal(r.code, 0, `berth deploy ${target}: ${r.stdout}\n${r.stderr}\n${up.output()}`);
    return r;
  };

  await t.test(
    '@function(cpu="100m", memory="100Mi"): a direct call runs remotely, .local() here',
    async () => {
      const out = await py("function");
      assert.match(out, /^direct: \{"x": 3, "remote": true\}$/m, out);
      assert.match(out, /^local: \{"x": 4, "remote": false\}$/m, out);
    },
  );

  let predictTask = "";
  await t.test("an endpoint with **inputs and a context answers the body's keys", async () => {
    await deploy("app.py:predict");
    const r = await post(up, "/endpoint/b9-predict", { a: 1, b: "two" });
    assert.equal(r.status, 200, r.text);
    const body = JSON.parse(r.text) as { inputs: unknown; task_id: string };
    assert.deepEqual(body.inputs, { a: 1, b: "two" });
    assert.match(body.task_id, /\S/);
    predictTask = body.task_id;
  });

  await t.test("the cpu=0.5 endpoint's stub.config matches the spec's table field by field", async () => {
    const r = await up.api(`/v2/task/${predictTask}/`);
    assert.equal(r.status, 200);
    const task = (await r.json()) as { stub: { config: string }; created_at: string };
    const config = JSON.parse(task.stub.config) as Record<string, unknown>;
    checkStubConfigAgainstSpec(config);
    const runtime = config.runtime as Record<string, unknown>;
    assert.equal(runtime.cpu, 500, "millicores, as beta9 reports them");
    assert.equal(runtime.memory, 128);
    assert.equal(runtime.gpu, "");
    assert.equal(config.handler, "app:predict");
    assert.equal(config.keep_warm_seconds, 30);
    assert.equal(config.authorized, true);
    const policy = config.task_policy as { expires: string; timeout: number };
    assert.equal(policy.timeout, 180);
    // The spec's request timeout: this task expired 180 s after it was created.
    assert.equal(Date.parse(policy.expires) - Date.parse(task.created_at), 180_000, policy.expires);
    // Asked of the container: the default image is Debian bookworm's, whose python3 is 3.11 (Image() says 3.8).
    assert.equal(config.python_version, "3.11");
  });

  await t.test("a realtime handler(context, data) gets the context first", async () => {
    await deploy("app.py:stream");
    const wsUrl = `${up.url.replace(/^http/, "ws")}/endpoint/b9-stream`;
    const reply = JSON.parse(await wsRoundTrip(wsUrl, up.token, '{"n": 7}'));
    assert.deepEqual(reply.echo, { n: 7 });
    assert.match(reply.stub_type, /^realtime/, "the context came first, as beta9 passes it");
  });

  await t.test("a task queue's put() answers a task whose .id the task status API knows", async () => {
    await deploy("app.py:jobs");
    const out = await py("queue");
    assert.match(out, /^result: 42$/m, out);
    const id = /^task: (\S+)$/m.exec(out)?.[1];
    assert.ok(id, out);
    const r = await up.api(`/v2/task/${id}/`);
    assert.equal(r.status, 200);
    const task = (await r.json()) as { id: string; status: string; stub: { name: string } };
    assert.equal(task.id, id);
    assert.equal(task.status, "COMPLETE");
  });

  await t.test(
    "a sandbox made with keep_warm_seconds runs code; sandboxes and pods are containers",
    async () => {
      const out = await py("sandbox");
      assert.match(out, /^sandbox: ctr-\S+ 42$/m, out);
      assert.match(out, /^terminated: True$/m, out);
    },
  );

  await t.test("a pod running `python` starts and is listed among the workspace's containers", async () => {
    const out = await py("pod");
    const m = /^pod: True (ctr-\S+) $/m.exec(out);
    assert.ok(m, out);
    const r = await up.api(`/api/v1/container/${ws}`);
    assert.equal(r.status, 200);
    const listed = JSON.stringify(await r.json());
    assert.ok(listed.includes(m[1] as string), listed);
  });

  await t.test(
    "a pod whose entrypoint does not exist reports why, on stderr and in result.error",
    async () => {
      const out = await py("bad-pod");
      assert.match(out, /^bad-pod: False .*no-such-program/m, out);
      assert.match(
        out,
        /^berth: the pod did not start: .*no-such-program/m,
        "printed for the program's user",
      );
    },
  );

  await t.test("a pod whose entrypoint exits at once reports its exit code and output", async () => {
    const out = await py("crash-pod");
    const line = /^crash-pod: (.*)$/m.exec(out)?.[1] ?? out;
    assert.match(line, /^False failed_precondition .*exited at once \(code 3\).*cannot bind/, out);
    assert.match(out, /^berth: the pod did not start: .*code 3/m, out);
  });

  await t.test("berth deploy of a pod whose entrypoint is not found says why and exits 1", async () => {
    const r = await up.cli(["deploy", "app.py:broken_pod"]);
    assert.equal(r.code, 1, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stderr, /^berth: the pod's container does not start: .*no-such-program/m, r.stderr);
  });

  await t.test("a request no host can place answers the reason on every path", async (tt) => {
    await tt.test("berth deploy warns at deploy time", async () => {
      for (const target of ["gpu_endpoint", "gpu_asgi", "gpu_realtime", "gpu_jobs"]) {
        const r = await deploy(`app.py:${target}`);
        assertNamesTheGpu(r.stderr);
        assert.match(r.stderr, /warning/i, r.stderr);
      }
    });
    await tt.test("endpoint", async () => {
      const r = await post(up, "/endpoint/b9-gpu", { a: 1 });
      assert.equal(r.status, 422, r.text);
      assert.match(r.text, /"code":"unplaceable"/, r.text);
      assertNamesTheGpu(r.text);
    });
    await tt.test("ASGI", async () => {
      const r = await up.api("/endpoint/b9-gpu-asgi/anything");
      const text = await r.text();
      assert.equal(r.status, 422, text);
      assertNamesTheGpu(text);
    });
    await tt.test("realtime", async () => {
      const wsUrl = `${up.url.replace(/^http/, "ws")}/endpoint/b9-gpu-rt`;
      await assert.rejects(wsRoundTrip(wsUrl, up.token, "1"), (e: Error) => {
        assert.match(e.message, /^HTTP 422/, e.message);
        assertNamesTheGpu(e.message);
        return true;
      });
    });
    await tt.test("function", async () => {
      const out = await py("gpu-function");
      const line = /^gpu-function: (.*)$/m.exec(out)?.[1] ?? out;
      assertNamesTheGpu(line);
    });
    await tt.test("task queue", async () => {
      const out = await py("gpu-queue");
      const id = /^gpu-queue: (\S+)$/m.exec(out)?.[1];
      assert.ok(id, out);
      assertNamesTheGpu(/^gpu-queue-error: (.*)$/m.exec(out)?.[1] ?? out);
      const r = await up.api(`/v2/task/${id}/`);
      assert.equal(((await r.json()) as { status: string }).status, "FAILED");
    });
    await tt.test("sandbox", async () => {
      const out = await py("gpu-sandbox");
      assertNamesTheGpu(/^gpu-sandbox: (.*)$/m.exec(out)?.[1] ?? out);
    });
    await tt.test("pod", async () => {
      const out = await py("gpu-pod");
      const line = /^gpu-pod: (.*)$/m.exec(out)?.[1] ?? out;
      assert.match(line, /^False unplaceable /, line);
      assertNamesTheGpu(line);
    });
  });
});
