// Stacks end to end, against a real `berth up` cluster: a stack
// of two endpoints deployed with `berth stack deploy app.py`, updated as one,
// and rolled back as one when the second member's new version fails (its
// on_start raises, so its runner's health route answers the load error):
// both names answer the previous version again, and the stack records the
// failed attempt with the member and the reason. Then a stack of an endpoint
// and a PostgreSQL database (berth.Database): deployed (the database made and
// ready first, the endpoint writing to it through DB_MAIN_URL), updated (the
// database kept with its rows), and rolled back when the endpoint's new
// version fails — the Redis database that attempt added is deleted again,
// the endpoint answers its previous version over the same data.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { databaseImageCommands } from "../../coordinator/databases/index.ts";
import { type BerthUp, UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { bearer } from "../helpers/auth.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const app = (version: number, backFails = false) => `
from berth import endpoint

VERSION = ${version}

def boot():
    raise RuntimeError("back v${version} cannot start")

@endpoint(name="front", cpu=0.25, memory=128, keep_warm_seconds=5)
def front():
    return {"front": VERSION}

@endpoint(name="back", cpu=0.25, memory=128, keep_warm_seconds=5${backFails ? ", on_start=boot" : ""})
def back():
    return {"back": VERSION}
`;

const dataApp = (version: number, o: { fails?: boolean; extraDb?: boolean } = {}) => `
import os, subprocess
from berth import Database, Image, endpoint

VERSION = ${version}
# Small pods: the test host runs both databases, the endpoint's versions and the first stack's.
db = Database("main", engine="postgres", cpu=0.25, memory=256)
${o.extraDb ? 'cache = Database("cache", engine="redis", cpu=0.25, memory=128)' : ""}
# The database's own build steps (cached after its build): the image has psql.
db_image = Image().add_commands(${JSON.stringify(databaseImageCommands())})

def boot():
    raise RuntimeError("reader v${version} cannot start")

@endpoint(name="reader", image=db_image, secrets=[db.secret_name], cpu=0.25, memory=256,
          keep_warm_seconds=30${o.fails ? ", on_start=boot" : ""})
def reader(sql: str):
    r = subprocess.run(["psql", os.environ[db.secret_name], "-v", "ON_ERROR_STOP=1", "-tAc", sql],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("psql failed: " + r.stderr)
    # psql prints each statement's status; the last line is the last query's answer.
    return {"v": VERSION, "out": r.stdout.strip().splitlines()[-1]}
`;

interface StackJson {
  id: string;
  name: string;
  current_version: number;
  latest: {
    version: number;
    status: string;
    failure: { member: string; reason: string } | null;
    members: { name: string; state: string; version: number | null }[];
  };
}

async function call(up: BerthUp, name: string, body: object = {}): Promise<unknown> {
  const r = await fetch(`${up.url}/endpoint/${name}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...bearer(up.token) },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(180_000),
  });
  const text = await r.text();
  assert.equal(r.status, 200, `${name}: ${text}`);
  return JSON.parse(text);
}

test("stacks deploy, update and roll back as one on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;
  const stackOf = async (name = "app"): Promise<StackJson> => {
    const { stacks } = (await (await up.api(`/api/v1/stack/${ws}`)).json()) as { stacks: StackJson[] };
    const s = stacks.find((x) => x.name === name);
    assert.ok(s, JSON.stringify(stacks));
    return s;
  };
  const deploy = async (version: number, backFails = false) => {
    writeFileSync(join(up.appDir, "app.py"), app(version, backFails));
    return up.cli(["stack", "deploy", "app.py", "--ready-timeout", "240"], 600_000);
  };

  await t.test("berth stack deploy: both endpoints deployed and ready", async () => {
    const r = await deploy(1);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}\n${up.output()}`);
    assert.match(r.stdout, /stack app version 1 is ready/);
    assert.deepEqual(await call(up, "front"), { front: 1 });
    assert.deepEqual(await call(up, "back"), { back: 1 });
  });

  await t.test("an update deploys both members' new versions as one", async () => {
    const r = await deploy(2);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}\n${up.output()}`);
    assert.match(r.stdout, /stack app version 2 is ready/);
    assert.deepEqual(await call(up, "front"), { front: 2 });
    assert.deepEqual(await call(up, "back"), { back: 2 });
    const s = await stackOf();
    assert.equal(s.current_version, 2);
  });

  await t.test("the second member's new version fails: both go back to the previous version", async () => {
    const r = await deploy(3, true);
    assert.equal(r.code, 1, `${r.stdout}\n${r.stderr}`);
    assert.match(
      r.stderr,
      /stack app version 3 was rolled back: back failed: its handler does not load: .*RuntimeError: back v3 cannot start/,
    );
    const s = await stackOf();
    assert.equal(s.current_version, 2, "the live version is still 2");
    assert.equal(s.latest.version, 3);
    assert.equal(s.latest.status, "rolled_back");
    assert.equal(s.latest.failure?.member, "back");
    assert.deepEqual(Object.fromEntries(s.latest.members.map((m) => [m.name, m.state])), {
      front: "rolled_back",
      back: "failed",
    });
    // front v3 (ready, or still waited for when back failed) is rolled back with it.
    assert.deepEqual(await call(up, "front"), { front: 2 });
    assert.deepEqual(await call(up, "back"), { back: 2 });
    const deps = (await (await up.api(`/api/v1/deployment/${ws}`)).json()) as {
      deployments: { name: string; version: number; active: boolean }[];
    };
    const v3 = deps.deployments.filter((d) => d.version === 3).map((d) => [d.name, d.active]);
    assert.deepEqual(v3.sort(), [
      ["back", false],
      ["front", false],
    ]);
  });

  // ---- an endpoint and a database ----
  td.defer(async () => {
    for (const name of ["main", "cache"]) await up.cli(["db", "delete", name, "--delete-data"]);
  });
  const deployData = async (version: number, o: { fails?: boolean; extraDb?: boolean } = {}) => {
    writeFileSync(join(up.appDir, "data.py"), dataApp(version, o));
    return up.cli(["stack", "deploy", "data.py", "--ready-timeout", "300"], 1_800_000);
  };
  const databases = async () =>
    (
      (await (await up.api(`/api/v1/database/${ws}`)).json()) as {
        databases: { name: string; status: string }[];
      }
    ).databases.map((d) => [d.name, d.status]);

  await t.test(
    "a stack of an endpoint and a database: the database first, the endpoint writes to it",
    async () => {
      const r = await deployData(1);
      assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}\n${up.output().slice(-4000)}`);
      assert.match(r.stdout, /stack data version 1 is ready/);
      assert.deepEqual(await databases(), [["main", "running"]]);
      const out = await call(up, "reader", {
        sql: "CREATE TABLE notes (id int PRIMARY KEY); INSERT INTO notes VALUES (1); SELECT count(*) FROM notes",
      });
      assert.deepEqual(out, { v: 1, out: "1" });
    },
  );

  await t.test("an update of the endpoint keeps the database and its rows", async () => {
    const r = await deployData(2);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /stack data version 2 is ready/);
    const s = await stackOf("data");
    const byName = Object.fromEntries(s.latest.members.map((m) => [m.name, m]));
    assert.equal((byName.main as { action?: string }).action, "keep");
    assert.deepEqual(
      await call(up, "reader", { sql: "INSERT INTO notes VALUES (2); SELECT count(*) FROM notes" }),
      {
        v: 2,
        out: "2",
      },
    );
  });

  await t.test(
    "the endpoint's new version fails: it goes back, the database the attempt added is deleted",
    async () => {
      const r = await deployData(3, { fails: true, extraDb: true });
      assert.equal(r.code, 1, `${r.stdout}\n${r.stderr}`);
      assert.match(
        r.stderr,
        /stack data version 3 was rolled back: reader failed: its handler does not load: .*reader v3 cannot start/,
      );
      const s = await stackOf("data");
      assert.equal(s.current_version, 2);
      assert.deepEqual(Object.fromEntries(s.latest.members.map((m) => [m.name, m.state])), {
        reader: "failed",
        main: "ready",
        cache: "rolled_back",
      });
      assert.deepEqual(
        await databases(),
        [["main", "running"]],
        "the redis database made by the attempt is gone",
      );
      assert.deepEqual(await call(up, "reader", { sql: "SELECT count(*) FROM notes" }), { v: 2, out: "2" });
    },
  );
});
