// Queue, Map and Signal against a real `berth up` cluster, one
// cluster for every case: 4 function containers draining one Queue of 1,000
// items get each item exactly once; a Map written by .map() over 200 inputs
// holds 200 keys; a Signal set from a script reaches the handler in a
// running endpoint container; `berth queue` / `berth map` inspect them.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown } from "../network/helpers.ts";

const APP = `
import json, os, sys, threading, time
from berth import Map, Queue, Signal, endpoint, function

@function(cpu=0.25, memory=128, timeout=600)
def drain(worker):
    # A barrier first, so four containers are popping at once.
    me = os.environ.get("BERTH_CONTAINER_ID", "?")
    barrier = Map("barrier")
    barrier[me] = worker
    deadline = time.time() + 300
    while len(barrier) < 4:
        if time.time() > deadline:
            raise RuntimeError("only %d containers reached the barrier" % len(barrier))
        time.sleep(0.2)
    q = Queue("jobs")
    got = []
    while True:
        item = q.pop()
        if item is None:
            return {"container": me, "items": got}
        got.append(item["n"])

@function(cpu=0.25, memory=128)
def record(x):
    Map("seen")[str(x)] = x * 2
    return x

fired = []
Signal("reload", handler=lambda: fired.append(time.time()))

@endpoint(name="watcher", cpu=0.25, memory=128, keep_warm_seconds=300)
def watcher(**kwargs):
    return {"fired": len(fired), "container": os.environ.get("BERTH_CONTAINER_ID")}

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "queue":
        q = Queue("jobs")
        for i in range(1000):
            q.put({"n": i})
        print("size:", q.size(), flush=True)
        print("drained:", json.dumps(list(drain.map(range(4)))))
        print("empty:", q.empty(), q.pop())
    elif case == "map":
        print("returned:", len(list(record.map(range(200)))))
        m = Map("seen")
        print("len:", len(m))
        print("items:", json.dumps(sorted(m.items())))
    elif case == "signal":
        s = Signal("reload")
        s.set(ttl=60)
        print("is_set:", s.is_set())
    elif case == "other":
        # Another workspace's token: the same names are other objects.
        print("other:", Queue("jobs").size(), len(Map("seen")), Signal("reload").is_set(), Map("seen").get("1"))
`;

test("Queue, Map and Signal end to end on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "curl"] })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;

  await t.test("4 containers popping one Queue of 1,000 items get each item exactly once", async () => {
    const out = await up.python(["app.py", "queue"], 600_000);
    assert.match(out, /^size: 1000$/m, out);
    const drained = JSON.parse(/^drained: (.*)$/m.exec(out)?.[1] ?? "null") as {
      container: string;
      items: number[];
    }[];
    assert.equal(drained.length, 4);
    assert.equal(new Set(drained.map((d) => d.container)).size, 4, "four distinct containers");
    const all = drained.flatMap((d) => d.items).sort((a, b) => a - b);
    assert.deepEqual(
      all,
      Array.from({ length: 1000 }, (_, i) => i),
    );
    assert.match(out, /^empty: True None$/m);
    const r = await up.cli(["queue", "ls", "--json"]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), []);
  });

  await t.test("a Map written by .map() over 200 inputs holds 200 keys", async () => {
    const out = await up.python(["app.py", "map"], 600_000);
    assert.match(out, /^returned: 200$/m, out);
    assert.match(out, /^len: 200$/m, out);
    const items = JSON.parse(/^items: (.*)$/m.exec(out)?.[1] ?? "null") as [string, number][];
    assert.deepEqual(
      items,
      Array.from({ length: 200 }, (_, i) => [String(i), i * 2] as [string, number]).sort((a, b) =>
        a[0] < b[0] ? -1 : 1,
      ),
    );
    const r = await up.cli(["map", "get", "seen", "--json"]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(JSON.parse(r.stdout).size, 200);
    const ls = await up.cli(["map", "ls", "--json"]);
    assert.deepEqual(
      (JSON.parse(ls.stdout) as { name: string }[]).map((m) => m.name),
      ["barrier", "seen"],
    );
  });

  await t.test("a Signal set from a script reaches the handler in a running endpoint container", async () => {
    const deployed = await up.cli(["deploy", "app.py:watcher"]);
    assert.equal(deployed.code, 0, `${deployed.stdout}\n${deployed.stderr}`);
    const call = async () => {
      const r = await fetch(`${up.url}/endpoint/watcher`, {
        method: "POST",
        headers: { authorization: `Bearer ${up.token}`, "content-type": "application/json" },
        body: "{}",
        signal: AbortSignal.timeout(180_000),
      });
      assert.equal(r.status, 200, await r.clone().text());
      return (await r.json()) as { fired: number; container: string };
    };
    const before = await call();
    assert.equal(before.fired, 0);
    const out = await up.python(["app.py", "signal"]);
    assert.match(out, /^is_set: True$/m, out);
    const after = await waitUntil(
      async () => {
        const r = await call();
        return r.fired > 0 ? r : undefined;
      },
      { what: "the endpoint container's handler to run", timeoutMs: 30_000, intervalMs: 100 },
    );
    assert.equal(after.container, before.container, "the same, already running container");
    assert.equal(after.fired, 1);
    const r = await up.api(`/api/v1/signal/${ws}/reload`);
    assert.equal(((await r.json()) as { set: boolean }).set, true);
  });

  await t.test(
    "another workspace sees none of it: its own empty objects, and 404 on this one's routes",
    async () => {
      const made = await up.api("/api/v1/workspace", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "other" }),
      });
      const other = ((await made.json()) as { token: string }).token;
      for (const path of [`/api/v1/queue/${ws}`, `/api/v1/map/${ws}/seen`, `/api/v1/signal/${ws}/reload`]) {
        const r = await fetch(`${up.url}${path}`, { headers: { authorization: `Bearer ${other}` } });
        assert.equal(r.status, 404, path);
      }
      const r = await fetch(`${up.url}/api/v1/map/${ws}/seen`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${other}` },
      });
      assert.equal(r.status, 404);
      const script = [
        "import os, runpy, sys",
        `os.environ["SERVICE_TOKEN"] = ${JSON.stringify(other)}`,
        'sys.argv = ["app.py", "other"]',
        'runpy.run_path("app.py", run_name="__main__")',
      ].join("; ");
      const out = await up.python(["-c", script]);
      assert.match(out, /^other: 0 0 False None$/m, out);
    },
  );
});
