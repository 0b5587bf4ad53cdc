// A sandbox has the agent socket a function's container has (the workspace
// bridge, no tasks): on a real `berth up` cluster, a process in a sandbox
// puts to and pops from a Queue, writes a Map, and saves an Output whose
// public URL serves it; the script outside sees the same Map and the queue
// item it put for the sandbox.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const IN_SANDBOX = `
import json
from berth import Map, Output, Queue
q = Queue(name="sb-jobs")
got = q.pop()
q.put({"from": "sandbox"})
m = Map(name="sb-seen")
m["sandbox"] = got
with open("/tmp/out.txt", "w") as f:
    f.write("saved in a sandbox")
o = Output(path="/tmp/out.txt")
o.save()
print(json.dumps({"got": got, "url": o.public_url(expires=600)}))
`;

const APP = `
import json, sys
from berth import Map, Queue, Sandbox

Queue(name="sb-jobs").put({"from": "script"})
sb = Sandbox(cpu=0.25, memory=128).create()
p = sb.process.exec("python3", "-c", ${JSON.stringify(IN_SANDBOX)}, env={"PYTHONPATH": "/berth/sdk"})
code = p.wait()
inside = json.loads(p.stdout.read()) if code == 0 else None
print("RESULT " + json.dumps({"code": code, "stderr": p.stderr.read() if code else "", "inside": inside,
    "queue": Queue(name="sb-jobs").pop(), "map": dict(Map(name="sb-seen").items())}), flush=True)
sb.terminate()
`;

test("a sandbox's process uses Queue, Map and Output through the agent socket", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);
  const out = await up.python(["app.py"]);
  const line = out.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(line, out);
  const r = JSON.parse(line.slice(7)) as {
    code: number;
    stderr: string;
    inside: { got: unknown; url: string };
    queue: unknown;
    map: Record<string, unknown>;
  };
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(r.inside.got, { from: "script" });
  assert.deepEqual(r.queue, { from: "sandbox" });
  assert.deepEqual(r.map, { sandbox: { from: "script" } });
  const got = await fetch(r.inside.url);
  assert.equal(got.status, 200);
  assert.equal(await got.text(), "saved in a sandbox");
});
