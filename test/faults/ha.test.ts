// Issue 18, requirement 1: `berth up --replicas 3` — three coordinators, a
// three-node JetStream cluster (streams with three copies) and PostgreSQL —
// runs the functions and deployments flows with every request spread over the
// coordinators by a round-robin balancer, and a `.map()` keeps every result
// while one coordinator is SIGKILLed in the middle of it, and another while
// one NATS node of three is stopped (the fault suite's summary lines,
// test/faults/summary.ts).

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { connect } from "nats";
import { waitFor } from "../../shared/net.ts";
import { TERMINAL_STATUSES } from "../../shared/tasks.ts";
import { UP_COMMANDS } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { startHaCluster } from "./ha-cluster.ts";
import { assertFaultSummary, countDuplicates, isFinalStatus, tallyTasks } from "./summary.ts";

const APP = `
import json, sys, time
from berth import asgi, endpoint, function

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
  const { up, coordinators, lb, db, env, killCoordinator, pauseSupervisor } = await startHaCluster(t);
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
      const taskRows = async () =>
        (
          await db.query(
            "select t.id, t.status, t.attempt from tasks t join stubs s on s.id = t.stub_id where s.name like $1",
            ["%slow_square"],
          )
        ).rows as { id: string; status: string; attempt: number }[];
      // The dead coordinator's unacknowledged events are redelivered to another after the consumer's
      // ack wait (30 s): a result its stream sent before its write was committed is written then.
      await waitFor(async () => (await taskRows()).every((r) => isFinalStatus(r.status)), {
        timeoutMs: 120_000,
        what: "every task of the map to have its final status in the store",
      }).catch(() => undefined);
      const rows = await taskRows();
      const ends = (
        await db.query(
          "select h.task_id from task_events h join tasks t on t.id = h.task_id join stubs s on s.id = t.stub_id where s.name like $1 and h.status = any($2)",
          ["%slow_square", [...TERMINAL_STATUSES]],
        )
      ).rows as { task_id: string }[];
      assertFaultSummary(
        t,
        "coordinator SIGKILL during map (3 coordinators)",
        tallyTasks(
          rows.map((r) => ({ id: r.id, status: r.status, attempts: r.attempt })),
          { duplicateResults: countDuplicates(ends.map((h) => h.task_id)), wrong },
        ),
      );
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
      await waitFor(async () => (await mine()).every((r) => isFinalStatus(r.status)), {
        timeoutMs: 120_000,
        what: "every task of the map to have its final status in the store",
      }).catch(() => undefined);
      const rows = await mine();
      const ends = (
        await db.query("select task_id from task_events where task_id = any($1) and status = any($2)", [
          rows.map((r) => r.id),
          [...TERMINAL_STATUSES],
        ])
      ).rows as { task_id: string }[];
      assertFaultSummary(
        t,
        "NATS node stopped during map (1 of 3)",
        tallyTasks(
          rows.map((r) => ({ id: r.id, status: r.status, attempts: r.attempt })),
          { duplicateResults: countDuplicates(ends.map((h) => h.task_id)), wrong },
        ),
      );
      assert.equal(rows.length, n, "one task per input");
    },
  );

  await t.test(
    "a coordinator SIGKILLed during streaming endpoint calls: the others' streams are whole, the cut ones fail, their tasks end FAILED",
    async () => {
      const d = await up.cli(["deploy", "app.py:streamer"], 240_000);
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
        await waitFor(async () => (await mine()).every((r) => isFinalStatus(r.status)), {
          timeoutMs: 120_000,
          what: "every streaming call's task to end (the survivors' check)",
        }).catch(() => undefined);
        const endedAfterS = Math.round((Date.now() - killedAt) / 1000);
        const rows = await mine();
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
        const finals = (
          await db.query("select task_id from task_events where task_id = any($1) and status = any($2)", [
            rows.map((r) => r.id),
            [...TERMINAL_STATUSES],
          ])
        ).rows as { task_id: string }[];
        t.diagnostic(`the killed coordinator's calls ended ${endedAfterS} s after the kill`);
        assertFaultSummary(
          t,
          "coordinator SIGKILL during a streaming endpoint call",
          tallyTasks(
            rows.map((r) => ({ id: r.id, status: r.status, attempts: r.attempt })),
            { duplicateResults: countDuplicates(finals.map((h) => h.task_id)), wrong },
          ),
        );
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
