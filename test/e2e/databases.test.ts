// Managed databases end to end on a `berth up` cluster: `berth db create
// postgres main` builds the database image (Debian's postgresql through the
// image builder) and runs the pod; a function that names the secret
// DB_MAIN_URL writes rows with `psql` through the runtime's forwarder and its
// agent socket (containers cannot reach each other); `berth db restart` ends
// the pod and starts another on the same volume, and the rows are still there;
// `berth db delete --delete-data` removes the data. Redis the same way with
// redis-cli, on the same cluster.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { databaseImageCommands } from "../../coordinator/databases/index.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

// The function runs from the same build steps as the database (cached after the
// database's build): its image has psql.
const APP = `
import os, subprocess, sys
from berth import Image, function

db_image = Image().add_commands(${JSON.stringify(databaseImageCommands())})

@function(image=db_image, secrets=["DB_MAIN_URL"], cpu=0.5, memory=256)
def sql(query):
    r = subprocess.run(["psql", os.environ["DB_MAIN_URL"], "-v", "ON_ERROR_STOP=1", "-tAc", query],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("psql failed: " + r.stderr)
    return r.stdout.strip()

@function(image=db_image, secrets=["DB_CACHE_URL"], cpu=0.5, memory=256)
def redis(*args):
    r = subprocess.run(["redis-cli", "-u", os.environ["DB_CACHE_URL"], "--no-auth-warning", *args],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or r.stdout.startswith("ERR") or "Could not connect" in r.stdout + r.stderr:
        raise RuntimeError("redis-cli failed: " + r.stdout + r.stderr)
    return r.stdout.strip()

if __name__ == "__main__":
    if sys.argv[1] == "redis":
        print("result:", repr(redis.remote(*sys.argv[2:])))
    else:
        print("result:", repr(sql.remote(sys.argv[1])))
`;

test("a function reads and writes PostgreSQL and Redis made with berth db create; the data survives a restart", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);
  const cli = async (args: string[], timeoutMs = 900_000) => {
    const r = await up.cli(args, timeoutMs);
    assert.equal(
      r.code,
      0,
      `berth ${args.join(" ")}: ${r.stdout}\n${r.stderr}\nberth up:\n${up.output().slice(-4000)}`,
    );
    return r.stdout;
  };
  const sql = async (query: string) => {
    const out = await up.python(["app.py", query], 900_000);
    return /result: '(.*)'/.exec(out)?.[1];
  };
  td.defer(async () => {
    await up.cli(["db", "delete", "main", "--delete-data"]);
  });

  const created = await cli(["db", "create", "postgres", "main"]);
  assert.match(created, /created postgres database main: running/);
  const listed = JSON.parse(await cli(["db", "list", "--json"])) as { name: string; status: string }[];
  assert.deepEqual(
    listed.map((d) => [d.name, d.status]),
    [["main", "running"]],
  );

  await sql("CREATE TABLE notes (id int PRIMARY KEY, body text)");
  await sql("INSERT INTO notes VALUES (1, 'kept across restarts'), (2, 'second')");
  assert.equal(await sql("SELECT count(*) FROM notes"), "2");

  const before = JSON.parse(await cli(["db", "get", "main", "--json"])) as { pod_id: string };
  assert.match(await cli(["db", "restart", "main"]), /restarted postgres database main: running/);
  const after = JSON.parse(await cli(["db", "get", "main", "--json"])) as { pod_id: string; status: string };
  assert.notEqual(after.pod_id, before.pod_id, "a new pod runs it");
  assert.equal(await sql("SELECT body FROM notes WHERE id = 1"), "kept across restarts");

  // Stopped: the function's connection is refused, by name, and the data stays.
  await cli(["db", "stop", "main"]);
  await assert.rejects(up.python(["app.py", "SELECT 1"], 300_000), /psql failed/);
  await cli(["db", "start", "main"]);
  assert.equal(await sql("SELECT count(*) FROM notes"), "2");

  assert.match(await cli(["db", "delete", "main", "--delete-data"]), /deleted database main and its data/);
  assert.deepEqual(JSON.parse(await cli(["db", "list", "--json"])), []);

  // Redis the same way on the same cluster (its image is the one built above): redis-cli ping
  // readiness, a function's SET and GET, the append-only data after a restart.
  const redis = async (...args: string[]) =>
    /result: '(.*)'/.exec(await up.python(["app.py", "redis", ...args], 900_000))?.[1];
  td.defer(async () => {
    await up.cli(["db", "delete", "cache", "--delete-data"]);
  });
  assert.match(
    await cli(["db", "create", "redis", "cache", "--memory", "256"]),
    /created redis database cache: running/,
  );
  assert.equal(await redis("SET", "greeting", "kept"), "OK");
  assert.match(await cli(["db", "restart", "cache"]), /restarted redis database cache: running/);
  assert.equal(await redis("GET", "greeting"), "kept");
});
