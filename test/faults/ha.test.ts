// Several coordinators: `berth up --replicas 3` — three coordinators, a
// three-node JetStream cluster (streams with three copies) and PostgreSQL —
// runs the functions and deployments flows with every request spread over the
// coordinators by a round-robin balancer, and a `.map()` keeps every result
// while one coordinator is SIGKILLed in the middle of it, and another while
// one NATS node of three is stopped (the fault suite's summary lines,
// test/faults/summary.ts). A second cluster (test/faults/ha-cluster.ts)
// takes a coordinator SIGKILLed during a deploy's image build and during
// streaming endpoint calls.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { connect } from "nats";
import { waitFor } from "../../shared/net.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { CLI_BIN, UP_COMMANDS } from "../helpers/berth-up.ts";
import { runCli } from "../helpers/cluster.ts";
import { needs } from "../helpers/env.ts";
import { startHaCluster } from "./ha-cluster.ts";
import { assertStoreSummary, rowsOnceFinal, taskRowsOfStubs } from "./ha-tasks.ts";

const APP = `
import json, sys, time
from berth import Image, asgi, endpoint, function

@function(cpu=0.25, memory=128)
def square(x):
    return x * x

@function(cpu=0.25, memory=128)
def slow_square(x):
    time.sleep(0.2)
    return x * x

@endpoint(name="hello", cpu=0.25, memory=128, keep_warm_seconds=60)
def hello(name: str = "world"):
    return {"hello": name}

@endpoint(name="slowbuild", cpu=0.25, memory=128, keep_warm_seconds=120,
          image=Image().add_commands(["sleep 25 && echo slow > /built-slowly"]))
def slowbuild(x: int = 0):
    return {"x": x, "built": open("/built-slowly").read().strip()}

@asgi(name="streamer", cpu=0.25, memory=128, concurrent_requests=8, keep_warm_seconds=600)
def streamer():
    import asyncio
    from urllib.parse import parse_qs

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                if m["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif m["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        q = parse_qs(scope["query_string"].decode())
        n, tag = int(q.get("n", ["1"])[0]), q.get("tag", ["-"])[0]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for i in range(n):
            await send({"type": "http.response.body", "body": f"{tag} {i}\\n".encode(), "more_body": True})
            await asyncio.sleep(0.25)
        await send({"type": "http.response.body", "body": f"{tag} end\\n".encode()})

    return app

if __name__ == "__main__":
    if sys.argv[1] == "square":
        print("remote:", square.remote(7))
        print("map:", json.dumps(list(square.map(range(60)))))
    elif sys.argv[1] == "slow":
        print("map:", json.dumps(list(slow_square.map(range(int(sys.argv[2]))))))
`;

test("berth up --replicas 3: functions and an endpoint through a round-robin balancer; a coordinator SIGKILLed mid-map", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const { up, coordinators, lb, db, env, killCoordinator } = await startHaCluster(t);
  assert.equal(Number((await db.query("select count(*) as n from workspaces")).rows[0].n), 1);
  writeFileSync(join(up.appDir, "app.py"), APP);
  await t.test("every stream is replicated on the three NATS nodes", async () => {
    const r = await up.api("/healthz");
    assert.equal(r.status, 200);
    const conf = JSON.parse(readFileSync(join(up.dataDir, "coordinator-2.json"), "utf8")) as {
      store: string;
      nats: { url: string; user: string; password: string };
    };
    assert.match(conf.store, /^postgres:\/\//);
    const urls = conf.nats.url.split(",");
    assert.equal(urls.length, 3);
    const nc = await connect({ servers: urls, user: conf.nats.user, pass: conf.nats.password });
    try {
      const jsm = await nc.jetstreamManager();
      const names: string[] = [];
      for await (const s of jsm.streams.list()) {
        names.push(s.config.name);
        assert.equal(s.config.num_replicas, 3, `${s.config.name} has three copies`);
        assert.equal(s.cluster?.replicas?.length, 2, `${s.config.name}: a leader and two current followers`);
      }
      assert.ok(names.includes("BERTH_TASKS") && names.includes("BERTH_TASK_EVENTS"), names.join(", "));
    } finally {
      await nc.close();
    }
  });

  await t.test("functions through the balancer: remote and map, every coordinator answering", async () => {
    const before = new Map(lb.served);
    const text = await up.python(["app.py", "square"], 240_000, env);
    assert.match(text, /^remote: 49$/m, text);
    assert.deepEqual(
      JSON.parse(/^map: (.*)$/m.exec(text)?.[1] ?? "null"),
      Array.from({ length: 60 }, (_, i) => i * i),
    );
    for (const c of coordinators)
      assert.ok((lb.served.get(c) ?? 0) > (before.get(c) ?? 0), `${c} answered requests of the run`);
  });

  await t.test("deploy; the endpoint answers on every coordinator", async () => {
    const r = await up.cli(["deploy", "app.py:hello"], 240_000);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    for (const c of [...coordinators, ...coordinators]) {
      const res = await fetch(`${c}/endpoint/hello`, {
        method: "POST",
        headers: { authorization: `Bearer ${up.token}`, "content-type": "application/json" },
        body: JSON.stringify({ name: c }),
        signal: AbortSignal.timeout(180_000),
      });
      assert.equal(res.status, 200, `${c}: ${await res.clone().text()}`);
      assert.deepEqual(await res.json(), { hello: c });
    }
  });

  await t.test(
    "a coordinator SIGKILLed during a .map(): every accepted task ends once, every result right",
    async () => {
      const n = 100;
      const run = up.python(["app.py", "slow", String(n)], 300_000, env);
      const finished = async () =>
        Number(
          (
            await db.query(
              "select count(*) as n from tasks t join stubs s on s.id = t.stub_id where s.name like $1 and t.status = 'COMPLETE'",
              ["%slow_square"],
            )
          ).rows[0].n,
        );
      await waitFor(async () => (await finished()) >= 10, {
        timeoutMs: 240_000,
        what: "the map to be under way",
      });
      killCoordinator(2);
      const done = await finished();
      assert.ok(done < n, `the kill came mid-map (${done}/${n} done)`);
      const text = await run;
      const results = JSON.parse(/^map: (.*)$/m.exec(text)?.[1] ?? "[]") as number[];
      const wrong = results.filter((v, i) => v !== i * i).length + Math.max(0, n - results.length);
      const taskRows = () => taskRowsOfStubs(db, "%slow_square");
      // The dead coordinator's unacknowledged events are redelivered to another after the consumer's
      // ack wait (30 s): a result its stream sent before its write was committed is written then.
      const rows = await rowsOnceFinal(
        taskRows,
        "every task of the map to have its final status in the store",
      );
      await assertStoreSummary(t, db, "coordinator SIGKILL during map (3 coordinators)", rows, wrong);
      assert.equal(rows.length, n, "one task per input");
    },
  );

  await t.test(
    "a NATS node stopped during a .map(): every accepted task ends once, every result right",
    async () => {
      const n = 100;
      const before = new Set(
        (
          (
            await db.query("select t.id from tasks t join stubs s on s.id = t.stub_id where s.name like $1", [
              "%slow_square",
            ])
          ).rows as { id: string }[]
        ).map((r) => r.id),
      );
      const run = up.python(["app.py", "slow", String(n)], 300_000, env);
      const mine = async () =>
        (
          (
            await db.query(
              "select t.id, t.status, t.attempt from tasks t join stubs s on s.id = t.stub_id where s.name like $1",
              ["%slow_square"],
            )
          ).rows as { id: string; status: string; attempt: number }[]
        ).filter((r) => !before.has(r.id));
      await waitFor(async () => (await mine()).filter((r) => r.status === "COMPLETE").length >= 10, {
        timeoutMs: 240_000,
        what: "the map to be under way",
      });
      // Node 1: the first URL of every client's list, so coordinators and the agent move to the others.
      const pid = Number(readFileSync(join(up.dataDir, "nats", "node-1", "nats.pid"), "utf8").trim());
      process.kill(pid, "SIGTERM");
      const done = (await mine()).filter((r) => r.status === "COMPLETE").length;
      assert.ok(done < n, `the stop came mid-map (${done}/${n} done)`);
      const text = await run;
      const results = JSON.parse(/^map: (.*)$/m.exec(text)?.[1] ?? "[]") as number[];
      const wrong = results.filter((v, i) => v !== i * i).length + Math.max(0, n - results.length);
      const rows = await rowsOnceFinal(mine, "every task of the map to have its final status in the store");
      await assertStoreSummary(t, db, "NATS node stopped during map (1 of 3)", rows, wrong);
      assert.equal(rows.length, n, "one task per input");
    },
  );
});

// A cluster of its own: the cases above leave a NATS node stopped.
test("berth up --replicas 3: a coordinator SIGKILLed during a deploy and during streaming endpoint calls", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const { up, coordinators, lb, db, env, killCoordinator, pauseSupervisor } = await startHaCluster(t);
  writeFileSync(join(up.appDir, "app.py"), APP);
  /** `berth ARGS` in the app's directory, every request through the balancer. */
  const cliThroughBalancer = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [CLI_BIN, ...args],
        { cwd: up.appDir, env: { ...up.env, ...env }, timeout: 400_000, maxBuffer: 16 << 20 },
        (err, stdout, stderr) =>
          resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr }),
      );
    });
  /** Waits until every coordinator answers (berth up restarts one an earlier case killed). */
  const everyCoordinatorAnswers = () =>
    waitFor(
      async () => {
        for (const c of coordinators)
          if ((await fetch(`${c}/healthz`).catch(() => undefined))?.ok !== true) return false;
        return true;
      },
      { timeoutMs: 120_000, what: "every coordinator to answer" },
    );

  await t.test(
    "a coordinator SIGKILLed during a deploy's image build: the deploy carries on through the balancer, nothing is left half done",
    async () => {
      await everyCoordinatorAnswers();
      // The build takes a core of the host's two: wait for the earlier cases' function runners (keep
      // warm 10 s) to go, or the agent refuses the build for want of room before the kill can land.
      const functionStubs = new Set(
        ((await db.query("select id from stubs where type = 'function'")).rows as { id: string }[]).map(
          (r) => r.id,
        ),
      );
      const sock = join(up.dataDir, "agent", "agent.sock");
      await waitFor(
        async () => {
          const ps = await runCli(["agent", "ps", "--json", "--socket", sock]);
          if (ps.code !== 0) return false;
          const running = JSON.parse(ps.stdout) as { labels?: Record<string, string> }[];
          return running.every((c) => !functionStubs.has(c.labels?.[RunnerLabels.stubId] ?? ""));
        },
        { timeoutMs: 120_000, what: "the earlier cases' function runners to stop" },
      );
      const deploy = () => cliThroughBalancer(["deploy", "app.py:slowbuild"]);
      const building = async () =>
        Number(
          (await db.query("select count(*) as n from built_images where status = 'building'")).rows[0].n,
        );
      let ended: { code: number; stdout: string; stderr: string } | undefined;
      const first = deploy().then((r) => {
        ended = r;
        return r;
      });
      // The kill lands on the coordinator holding the build's stream, once its step runs (25 s of sleep).
      let holder = "";
      await waitFor(
        async () => {
          holder =
            [...lb.inFlight].find((f) => f.method === "POST" && f.path.endsWith("/build"))?.backend ?? "";
          return ended !== undefined || (holder !== "" && (await building()) > 0);
        },
        { timeoutMs: 240_000, what: "the deploy's image build to be under way" },
      );
      assert.equal(
        ended,
        undefined,
        `the deploy ended before its build was under way: ${JSON.stringify(ended)}`,
      );
      await new Promise((r) => setTimeout(r, 3000)); // into the step, not at its start
      assert.equal(ended, undefined, `the deploy ended before the kill: ${JSON.stringify(ended)}`);
      const n = coordinators.indexOf(holder) + 1;
      killCoordinator(n);
      const r1 = await first;
      assert.equal(r1.code, 0, `the deploy carried on through the balancer:\n${r1.stdout}\n${r1.stderr}`);
      assert.match(r1.stderr, /the build's connection broke/, "the build was asked for again");
      assert.match(r1.stdout, /deployed slowbuild version 1/);
      await waitFor(async () => (await fetch(`${holder}/healthz`).catch(() => undefined))?.ok === true, {
        timeoutMs: 120_000,
        what: `berth up to start coordinator ${n} again`,
      });
      const r2 = await deploy();
      assert.equal(r2.code, 0, `a second deploy through the balancer:\n${r2.stdout}\n${r2.stderr}`);
      assert.match(r2.stdout, /deployed slowbuild version 2/);

      // Nothing half done: no build left building, every version has its stub, versions 1 and 2 only.
      await waitFor(async () => (await building()) === 0, {
        timeoutMs: 120_000,
        what: "no image build left 'building'",
      });
      const versions = (
        await db.query("select version, stub_id, active from deployments where name = $1 order by version", [
          "slowbuild",
        ])
      ).rows as { version: number; stub_id: string | null; active: number | boolean }[];
      assert.deepEqual(
        versions.map((v) => v.version),
        [1, 2],
        JSON.stringify(versions),
      );
      assert.ok(
        versions.every((v) => v.stub_id),
        `every version has its stub: ${JSON.stringify(versions)}`,
      );
      // The latest active version answers on every coordinator, from the built image.
      let wrong = 0;
      for (const [i, c] of [...coordinators, ...coordinators].entries()) {
        const res = await fetch(`${c}/endpoint/slowbuild`, {
          method: "POST",
          headers: { authorization: `Bearer ${up.token}`, "content-type": "application/json" },
          body: JSON.stringify({ x: i }),
          signal: AbortSignal.timeout(180_000),
        });
        const body = (await res.json().catch(() => null)) as unknown;
        if (res.status !== 200 || JSON.stringify(body) !== JSON.stringify({ x: i, built: "slow" })) {
          wrong++;
          t.diagnostic(`${c}: ${res.status} ${JSON.stringify(body)}`);
        }
      }
      const taskRows = () => taskRowsOfStubs(db, "slowbuild/%");
      // A call's answer comes before its task's row is written (batched): wait for the writes.
      const rows = await rowsOnceFinal(
        taskRows,
        "every endpoint call's task to have its final status in the store",
        {
          timeoutMs: 60_000,
          atLeast: 6,
        },
      );
      await assertStoreSummary(t, db, "coordinator SIGKILL during a deploy", rows, wrong);
      assert.equal(rows.length, 6, "one task per endpoint call");
    },
  );
  await t.test(
    "a coordinator SIGKILLed during streaming endpoint calls: the others' streams are whole, the cut ones fail, their tasks end FAILED",
    async () => {
      await everyCoordinatorAnswers();
      const d = await cliThroughBalancer(["deploy", "app.py:streamer"]);
      assert.equal(d.code, 0, `${d.stdout}\n${d.stderr}`);
      const call = (c: string, query: string, signal?: AbortSignal) =>
        fetch(`${c}/endpoint/streamer?${query}`, {
          headers: { authorization: `Bearer ${up.token}` },
          signal: signal ?? AbortSignal.timeout(180_000),
        });
      // The container is up and every coordinator reaches it.
      for (const c of coordinators) {
        const r = await call(c, "n=1&tag=warm");
        assert.equal(r.status, 200, `${c}: ${await r.clone().text()}`);
        assert.equal(await r.text(), "warm 0\nwarm end\n");
      }
      const streamerTasks = async () =>
        (
          await db.query(
            "select t.id, t.status, t.attempt, t.error_json from tasks t join stubs s on s.id = t.stub_id where s.name like $1 order by t.created_at",
            ["%streamer%"],
          )
        ).rows as { id: string; status: string; attempt: number; error_json: string | null }[];
      const before = new Set((await streamerTasks()).map((r) => r.id));

      // Two slow streams through each coordinator (40 chunks, 10 s each).
      const n = 40;
      const expected = (tag: string) =>
        `${Array.from({ length: n }, (_, i) => `${tag} ${i}\n`).join("")}${tag} end\n`;
      const streams = [0, 1, 2].flatMap((ci) =>
        [0, 1].map((k) => {
          const tag = `c${ci + 1}s${k}`;
          const s = { coordinator: ci + 1, tag, text: "", done: false, error: undefined as unknown };
          const run = (async () => {
            const r = await call(coordinators[ci] as string, `n=${n}&tag=${tag}`);
            assert.equal(r.status, 200, `${tag}: ${r.status}`);
            const reader = (r.body as ReadableStream<Uint8Array>).getReader();
            const dec = new TextDecoder();
            for (;;) {
              const { value, done } = await reader.read();
              if (done) break;
              s.text += dec.decode(value, { stream: true });
            }
            s.done = true;
          })().catch((e) => {
            s.error = e;
          });
          return { s, run };
        }),
      );
      await waitFor(() => streams.every(({ s }) => s.text.split("\n").length > 3), {
        timeoutMs: 120_000,
        what: "every stream to be under way",
      });
      // berth up paused: the killed coordinator stays dead, so the survivors' check must end its requests.
      const resume = pauseSupervisor();
      const killedAt = Date.now();
      try {
        killCoordinator(2);
        await Promise.all(streams.map(({ run }) => run));
        assert.ok(
          streams.filter(({ s }) => s.coordinator === 2).every(({ s }) => !s.done),
          "the kill came mid-stream",
        );
        const mine = async () => (await streamerTasks()).filter((r) => !before.has(r.id));
        const rows = await rowsOnceFinal(mine, "every streaming call's task to end (the survivors' check)");
        const endedAfterS = Math.round((Date.now() - killedAt) / 1000);
        assert.equal(rows.length, streams.length, "one task per call");
        const cut = rows.filter((r) => r.status === "FAILED");
        assert.equal(cut.length, 2, `the killed coordinator's two calls failed: ${JSON.stringify(rows)}`);
        for (const r of cut) {
          const err = JSON.parse(r.error_json ?? "{}") as { type?: string; message?: string };
          assert.equal(err.type, "CoordinatorDied", JSON.stringify(err));
          assert.match(err.message ?? "", /coordinator serving this request died/);
        }
        assert.equal(rows.filter((r) => r.status === "COMPLETE").length, 4, JSON.stringify(rows));
        // Whole streams through the live coordinators; a cut one is an error to its caller, never a short answer.
        let wrong = 0;
        for (const { s } of streams) {
          if (s.coordinator === 2) wrong += s.done ? 1 : 0;
          else wrong += s.done && s.text === expected(s.tag) ? 0 : 1;
        }
        t.diagnostic(`the killed coordinator's calls ended ${endedAfterS} s after the kill`);
        await assertStoreSummary(t, db, "coordinator SIGKILL during a streaming endpoint call", rows, wrong);
      } finally {
        resume();
      }
      await waitFor(
        async () => (await fetch(`${coordinators[1]}/healthz`).catch(() => undefined))?.ok === true,
        {
          timeoutMs: 120_000,
          what: "berth up to start coordinator 2 again",
        },
      );
    },
  );
});
