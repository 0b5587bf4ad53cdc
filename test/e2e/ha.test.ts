// Issue 18, requirement 1: `berth up --replicas 3` — three coordinators, a
// three-node JetStream cluster (streams with three copies) and PostgreSQL —
// runs the functions and deployments flows with every request spread over the
// coordinators by a round-robin balancer. (A coordinator SIGKILLed mid-map is
// not covered yet: docs/reliability.md, "Several coordinators".)

import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { connect } from "nats";
import pg from "pg";
import { waitFor } from "../../shared/net.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { startRoundRobin } from "../helpers/round-robin.ts";
import { Teardown } from "../network/helpers.ts";

const APP = `
import json, sys
from berth import endpoint, function

@function(cpu=0.25, memory=128)
def square(x):
    return x * x

@endpoint(name="hello", cpu=0.25, memory=128, keep_warm_seconds=60)
def hello(name: str = "world"):
    return {"hello": name}

if __name__ == "__main__":
    if sys.argv[1] == "square":
        print("remote:", square.remote(7))
        print("map:", json.dumps(list(square.map(range(60)))))
`;

/** The pid of the postgres server whose data dir is `data`. */
function postgresPid(data: string): number | undefined {
  try {
    return Number(readFileSync(join(data, "postmaster.pid"), "utf8").split("\n")[0]);
  } catch {
    return undefined;
  }
}

test("berth up --replicas 3: functions and an endpoint through a round-robin balancer over three coordinators", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td, ["--replicas", "3"]);
  const out = up.output();
  const coordinators = /coordinators:\s+(.+?)\s+\(any one/.exec(out)?.[1]?.split(" ") ?? [];
  assert.equal(coordinators.length, 3, `three coordinator URLs in:\n${out}`);
  const pgLine = /PostgreSQL on 127\.0\.0\.1:(\d+), data in (\S+)/.exec(out);
  assert.ok(pgLine, `berth up ran PostgreSQL:\n${out}`);
  const pgData = pgLine[2] as string;
  // berth up keeps PostgreSQL's data out of a 0700 home (under /var/lib/postgresql): gone with the test.
  td.defer(async () => {
    const pid = postgresPid(pgData);
    if (pid) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {}
    }
    await waitFor(() => !pid || !existsPid(pid), { timeoutMs: 30_000, what: "postgres to exit" });
    if (pgData.startsWith("/var/lib/postgresql/berth-up/"))
      rmSync(dirname(pgData), { recursive: true, force: true });
  });
  // The coordinators' store is the PostgreSQL berth up runs.
  const db = new pg.Client({ connectionString: `postgres://berth@127.0.0.1:${pgLine[1]}/postgres` });
  await db.connect();
  td.defer(() => db.end());
  assert.equal(Number((await db.query("select count(*) as n from workspaces")).rows[0].n), 1);

  const lb = await startRoundRobin(coordinators);
  td.defer(() => lb.close());
  const env = { BERTH_URL: lb.url };
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
});

function existsPid(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
