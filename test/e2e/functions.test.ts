import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";
import { SPEC_TASK_FIELDS } from "../tasks/fixtures.ts";

// The user's file of the issue, plus the retry and timeout cases. Calls sit
// under the main guard: the runner imports this module in the container.
const APP = `
import json, os, sys, time
from berth import function

@function(cpu=1, memory=128)
def square(x):
    return x * x

@function(cpu=0.5, memory=128, retries=2)
def crash_once():
    if os.environ.get("BERTH_TASK_ATTEMPT") == "1":
        print("crashing on attempt 1", flush=True)
        os._exit(1)
    return "survived attempt " + os.environ.get("BERTH_TASK_ATTEMPT", "?")

@function(cpu=0.5, memory=128, timeout=2)
def sleepy():
    time.sleep(60)

@function(cpu=0.5, memory=128)
def shout(word):
    print("remote says", word)
    raise KeyError(word)

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "square":
        print("remote:", square.remote(7))
        print("map:", json.dumps(list(square.map(range(100)))))
    elif case == "crash":
        print("crash:", crash_once.remote())
    elif case == "timeout":
        t0 = time.time()
        try:
            sleepy.remote()
        except Exception as e:
            print("timeout:", type(e).__name__, getattr(e, "task_id", ""), round(time.time() - t0, 1))
    elif case == "error":
        try:
            shout.remote("boo")
        except KeyError as e:
            print("caught:", repr(e))
`;

test("functions end to end on a berth up cluster: remote, map, retry, timeout, remote errors, task API", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const { appDir, dataDir } = up;
  writeFileSync(join(appDir, "app.py"), APP);
  writeFileSync(join(appDir, ".berthignore"), "big.bin\n");
  writeFileSync(join(appDir, "big.bin"), Buffer.alloc(1024));
  const py = (scenario: string) => up.python(["app.py", scenario]);
  const api = async (path: string) => {
    const r = await up.api(path);
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };

  await t.test("square.remote(7) and square.map(range(100))", async () => {
    const out = await py("square");
    assert.match(out, /^remote: 49$/m, out);
    const mapped = JSON.parse(/^map: (.*)$/m.exec(out)?.[1] ?? "null");
    assert.deepEqual(
      mapped,
      Array.from({ length: 100 }, (_, i) => i * i),
    );
  });

  await t.test("a remote exception is raised in the caller with its output printed", async () => {
    const out = await py("error");
    assert.match(out, /remote says boo/);
    assert.match(out, /caught: KeyError\('boo'\)/);
  });

  await t.test(
    "a container crash on attempt 1 is retried and completes; the retry is in the history",
    async () => {
      const out = await py("crash");
      assert.match(out, /crash: survived attempt 2/, out);
      assert.match(out, /crashing on attempt 1/, "the first attempt's output reached the caller");
      // The task's id, from the coordinator's store; its history comes from the REST route.
      const db = new Database(join(dataDir, "coordinator", "berth.db"), { readonly: true });
      const row = db
        .prepare(
          "SELECT t.id FROM tasks t JOIN stubs s ON s.id = t.stub_id WHERE s.name = 'crash_once' ORDER BY t.created_at DESC LIMIT 1",
        )
        .get() as { id: string };
      db.close();
      const ws = (await api("/api/v1/workspace/current")).body.external_id as string;
      const rest = await api(`/api/v1/task/${ws}/${row.id}`);
      assert.equal(rest.body.status, "COMPLETE");
      const history = (rest.body.history as { status: string; attempt: number }[]).map(
        (h) => `${h.status}:${h.attempt}`,
      );
      assert.deepEqual(
        history.slice(-4),
        ["RUNNING:1", "RETRY:1", "RUNNING:2", "COMPLETE:2"],
        history.join(" "),
      );
    },
  );

  let timeoutTaskId = "";
  await t.test("timeout=2 ends TIMEOUT within a few seconds of 2 s", async () => {
    const out = await py("timeout");
    const m = /timeout: TaskTimeoutError (\S+) ([\d.]+)/.exec(out);
    assert.ok(m, out);
    timeoutTaskId = m[1] as string;
    const secs = Number(m[2]);
    assert.ok(secs >= 2 && secs < 30, `ended after ${secs}s`);
  });

  await t.test("the task status API answers the spec's Task shape", async () => {
    const { status, body } = await api(`/v2/task/${timeoutTaskId}/`);
    assert.equal(status, 200, JSON.stringify(body));
    assert.deepEqual(Object.keys(body).sort(), SPEC_TASK_FIELDS);
    assert.equal(body.status, "TIMEOUT");
    const stub = body.stub as Record<string, unknown>;
    const config = JSON.parse(stub.config as string) as { task_policy: { timeout: number } };
    assert.equal(config.task_policy.timeout, 2);
    assert.equal(typeof stub.config_version, "number");
    const ws = (await api("/api/v1/workspace/current")).body.external_id as string;
    const rest = await api(`/api/v1/task/${ws}/${timeoutTaskId}`);
    assert.equal(rest.status, 200);
    assert.ok(
      (rest.body.history as { status: string }[]).some((h) => h.status === "RUNNING"),
      JSON.stringify(rest.body.history),
    );
  });
});
