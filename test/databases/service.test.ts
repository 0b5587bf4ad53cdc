// DatabaseService over the real sandbox service, secret service and SQLite
// store with a fake agent (test/databases/fakes.ts): what a create runs, the
// secret it writes, readiness, stop/start/restart, delete with and without
// the data, scoping, and refusals.

import assert from "node:assert/strict";
import { test } from "node:test";
import { BerthError } from "../../shared/errors.ts";
import { databaseWorld } from "./fakes.ts";

const code = (e: unknown) => (e instanceof BerthError ? e.code : String(e));

test("create postgres: a pod of the engine's image with its volume and secret, ready after pg_isready passes", async (t) => {
  const d = await databaseWorld(t);
  const checks = d.answerChecks([2, 2, 0]);
  const v = await d.db.create(d.w.ws, { engine: "postgres", name: "main" });
  assert.equal(v.status, "running");
  assert.equal(checks.answered(), 3, "two failed readiness checks, then one that passed");
  assert.deepEqual(
    [v.name, v.engine, v.secret_name, v.volume, v.host, v.local_port, v.port],
    ["main", "postgres", "DB_MAIN_URL", "db-main", "127.0.0.1", 15432, 5432],
  );
  assert.ok(v.pod_id?.startsWith("ctr-"));
  assert.equal(v.agent_id, "agent-a");

  const url = (await d.secrets.resolve(d.w.ws, ["DB_MAIN_URL"])).DB_MAIN_URL as string;
  const m = /^postgresql:\/\/berth:([0-9a-f]{32})@127\.0\.0\.1:15432\/postgres$/.exec(url);
  assert.ok(m, `the secret holds a postgres URL: ${url}`);
  const password = m[1] as string;

  const run = d.agent.runs.at(-1);
  assert.ok(run);
  assert.equal(run.image, "registry.test/berth/databases:1");
  assert.deepEqual(
    run.volumes?.map((x) => [x.name, x.mountPath]),
    [["db-main", "/var/lib/berth-db"]],
  );
  assert.equal(run.env?.DB_MAIN_URL, url, "the pod reads its password from the secret's variable");
  assert.doesNotMatch(JSON.stringify(run.args), new RegExp(password), "the password is in no argument");
  assert.match(run.args.join(" "), /initdb/);
  // Its agent finds it by these labels and dials the exposed server port from the host.
  assert.deepEqual(
    [run.labels?.["berth.database_local_port"], run.labels?.["berth.database_port"], run.exposedPorts],
    ["15432", "5432", [5432]],
  );
  const check = d.agent.execs[0]?.req;
  assert.deepEqual(check?.args.slice(0, 2), ["pg_isready", "-q"]);
  assert.ok(d.logs.length > 0);
  assert.doesNotMatch(d.logs.join(""), new RegExp(password), "the password is in no log line");
  assert.deepEqual(d.images, [d.w.ws]);
});

test("local ports per engine, redis readiness with the password in the environment, name and engine refusals", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  await d.db.create(d.w.ws, { engine: "postgres", name: "a" });
  const b = await d.db.create(d.w.ws, { engine: "postgres", name: "b" });
  assert.equal(b.local_port, 15433);
  const cache = await d.db.create(d.w.ws, { engine: "redis", name: "cache-1" });
  assert.deepEqual([cache.local_port, cache.port, cache.secret_name], [16379, 6379, "DB_CACHE_1_URL"]);
  const url = (await d.secrets.resolve(d.w.ws, ["DB_CACHE_1_URL"])).DB_CACHE_1_URL as string;
  const pw = /^redis:\/\/default:([0-9a-f]{32})@127\.0\.0\.1:16379\/0$/.exec(url)?.[1];
  assert.ok(pw, url);
  const redisCheck = d.agent.execs.at(-1)?.req;
  assert.equal(redisCheck?.env?.REDISCLI_AUTH, pw);
  assert.doesNotMatch(JSON.stringify(redisCheck?.args), new RegExp(pw));
  // The other workspace starts at the first port again: ports are per workspace.
  assert.equal((await d.db.create(d.w.otherWs, { engine: "postgres", name: "a" })).local_port, 15432);

  const refusals: [unknown, string, RegExp][] = [
    [{ engine: "mysql", name: "x" }, "invalid_request", /engine "mysql".*postgres or redis/],
    [{ engine: "postgres", name: "Bad_Name" }, "invalid_request", /database name "Bad_Name" is not valid/],
    [{ engine: "postgres", name: "" }, "invalid_request", /database name "" is not valid/],
    [{ engine: "postgres", name: "a" }, "conflict", /database a already exists/],
    [{ engine: "postgres", name: "z", memory: 1 }, "invalid_request", /memory must be a number/],
  ];
  for (const [req, want, msg] of refusals) {
    await assert.rejects(
      d.db.create(d.w.ws, req as { engine: string; name: string }),
      (e: unknown) => code(e) === want && msg.test((e as Error).message),
      JSON.stringify(req),
    );
  }
  assert.deepEqual(
    (await d.db.list(d.w.ws)).map((x) => x.name),
    ["a", "b", "cache-1"],
  );
});

test("stop ends the pod and keeps the data's volume; start runs a new pod; restart does both", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  const first = await d.db.create(d.w.ws, { engine: "postgres", name: "main" });
  const stopped = await d.db.stop(d.w.ws, "main");
  assert.deepEqual([stopped.status, stopped.pod_id], ["stopped", null]);
  assert.equal((await d.w.svc.get(d.w.ws, first.pod_id as string)).status, "terminated");
  assert.equal((await d.db.stop(d.w.ws, "main")).status, "stopped", "stopping twice is no error");

  const started = await d.db.start(d.w.ws, "main");
  assert.equal(started.status, "running");
  assert.notEqual(started.pod_id, first.pod_id);
  assert.deepEqual(
    d.agent.runs.at(-1)?.volumes?.map((x) => x.name),
    ["db-main"],
    "the new pod mounts the same volume",
  );
  const restarted = await d.db.restart(d.w.ws, "main");
  assert.equal(restarted.status, "running");
  assert.notEqual(restarted.pod_id, started.pod_id);
  assert.equal((await d.w.svc.get(d.w.ws, started.pod_id as string)).status, "terminated");
  assert.equal(
    (await d.db.start(d.w.ws, "main")).pod_id,
    restarted.pod_id,
    "start of a running one is a no-op",
  );
});

/** The database "main" as a coordinator that died between its pod's start and its readiness leaves it: starting, since `at` (default: its last change). */
async function leaveStarting(
  d: Awaited<ReturnType<typeof databaseWorld>>,
  v: { pod_id: string | null; agent_id: string | null },
  at?: string,
): Promise<void> {
  const rec = await d.w.store.databases.find(d.w.ws, "main");
  assert.ok(rec);
  await d.w.store.databases.setState(
    rec.id,
    { status: "starting", podId: v.pod_id, agentId: v.agent_id },
    at ?? rec.updatedAt,
  );
}

test("a start cut short (left starting) is a conflict for start, and restart ends it and starts again", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  const v = await d.db.create(d.w.ws, { engine: "postgres", name: "main" });
  await leaveStarting(d, v);
  await assert.rejects(
    d.db.start(d.w.ws, "main"),
    (e: unknown) => code(e) === "conflict" && /berth db restart main/.test((e as Error).message),
  );
  const again = await d.db.restart(d.w.ws, "main");
  assert.equal(again.status, "running");
  assert.notEqual(again.pod_id, v.pod_id);
  assert.equal((await d.w.svc.get(d.w.ws, v.pod_id as string)).status, "terminated");
});

test("a start nobody finishes reads as failed once its readiness wait has passed: its pod ended, start runs again", async (t) => {
  let now = Date.now();
  const d = await databaseWorld(t, { clock: () => now, readyTimeoutMs: 120_000 });
  d.answerChecks([0, 0]);
  const v = await d.db.create(d.w.ws, { engine: "postgres", name: "main" });
  await leaveStarting(d, v, new Date(now).toISOString());
  now += 120_000; // within the readiness wait (plus one check and a minute): still starting
  assert.equal((await d.db.get(d.w.ws, "main")).status, "starting");
  now += 80_000;
  const got = await d.db.get(d.w.ws, "main");
  assert.equal(got.status, "failed");
  assert.match(got.error ?? "", /start was cut short/);
  assert.equal((await d.w.svc.get(d.w.ws, v.pod_id as string)).status, "terminated");
  const again = await d.db.start(d.w.ws, "main");
  assert.equal(again.status, "running");
  assert.notEqual(again.pod_id, v.pod_id);
});

test("a database whose pod ended reads as failed, with the reason; start brings it back", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  const v = await d.db.create(d.w.ws, { engine: "redis", name: "cache" });
  await d.w.svc.terminate(d.w.ws, v.pod_id as string);
  const got = await d.db.get(d.w.ws, "cache");
  assert.equal(got.status, "failed");
  assert.match(got.error, /its pod ctr-.* ended: terminated by request/);
  assert.equal((await d.db.start(d.w.ws, "cache")).status, "running");
});

test("a readiness check that never passes fails the create, ends the pod and records why", async (t) => {
  const d = await databaseWorld(t, { readyTimeoutMs: 0 });
  d.answerChecks([2]);
  await assert.rejects(
    d.db.create(d.w.ws, { engine: "postgres", name: "slow" }),
    (e: unknown) =>
      code(e) === "unavailable" && /pg_isready\) did not pass within 0 s/.test((e as Error).message),
  );
  const v = await d.db.get(d.w.ws, "slow");
  assert.deepEqual([v.status, v.pod_id], ["failed", null]);
  assert.match(v.error, /did not pass/);
  const pod = d.agent.runs.at(-1)?.id as string;
  assert.equal((await d.w.svc.get(d.w.ws, pod)).status, "terminated");
});

test("delete keeps the volume and the secret (a create again reuses the password); --delete-data removes both", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  await d.db.create(d.w.ws, { engine: "postgres", name: "keep" });
  const before = (await d.secrets.resolve(d.w.ws, ["DB_KEEP_URL"])).DB_KEEP_URL as string;
  await d.db.delete(d.w.ws, "keep");
  await assert.rejects(d.db.get(d.w.ws, "keep"), (e: unknown) => code(e) === "not_found");
  assert.deepEqual(d.removedVolumes, []);
  assert.equal((await d.secrets.resolve(d.w.ws, ["DB_KEEP_URL"])).DB_KEEP_URL, before);

  await d.db.create(d.w.ws, { engine: "postgres", name: "keep" });
  assert.equal(
    (await d.secrets.resolve(d.w.ws, ["DB_KEEP_URL"])).DB_KEEP_URL,
    before,
    "the kept password opens the kept data",
  );
  await d.db.delete(d.w.ws, "keep", { deleteData: true });
  assert.deepEqual(d.removedVolumes, [`${d.w.ws}/db-keep`]);
  await assert.rejects(d.secrets.resolve(d.w.ws, ["DB_KEEP_URL"]), (e: unknown) => code(e) === "not_found");
  // A secret of that name the user made is not taken over.
  await d.secrets.create(d.w.ws, "DB_MINE_URL", "postgresql://me:hunter2@example/x");
  await assert.rejects(
    d.db.create(d.w.ws, { engine: "postgres", name: "mine" }),
    (e: unknown) => code(e) === "conflict" && /secret DB_MINE_URL/.test((e as Error).message),
  );
  await assert.rejects(d.db.get(d.w.ws, "mine"), (e: unknown) => code(e) === "not_found");
});

test("another workspace's database is not found for every call", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  await d.db.create(d.w.ws, { engine: "postgres", name: "main" });
  for (const call of [
    () => d.db.get(d.w.otherWs, "main"),
    () => d.db.start(d.w.otherWs, "main"),
    () => d.db.stop(d.w.otherWs, "main"),
    () => d.db.restart(d.w.otherWs, "main"),
    () => d.db.delete(d.w.otherWs, "main", { deleteData: true }),
  ])
    await assert.rejects(call(), (e: unknown) => code(e) === "not_found");
  assert.deepEqual(await d.db.list(d.w.otherWs), []);
  assert.equal((await d.db.get(d.w.ws, "main")).status, "running");
  assert.deepEqual(d.removedVolumes, []);
});
