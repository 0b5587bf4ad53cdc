// `berth db ...` (the real CLI, as a child process) against the database
// routes served on loopback over the real DatabaseService, sandbox service,
// secret service and SQLite store with a fake agent (fakes.ts): what each
// command sends and prints, --json, and that no output carries the password.

import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { databaseRoutes } from "../../coordinator/databases/routes.ts";
import { workspaceRoutes } from "../../coordinator/workspaces/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { runCli } from "../helpers/cluster.ts";
import { tempDir } from "../helpers/env.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { databaseWorld } from "./fakes.ts";

test("berth db create/list/get/stop/start/restart/delete; the password is never printed", async (t) => {
  const d = await databaseWorld(t);
  d.answerChecks([0]);
  const app = routesApp();
  await app.register(tokenScope(d.w.store.tokens, workspaceRoutes(d.w.store), databaseRoutes(d.db)));
  await app.listen({ host: "127.0.0.1", port: 0 });
  t.after(() => app.close());
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const token = (await d.w.store.tokens.create(d.w.ws)).secret;
  const env = { HOME: tempDir(t), SERVICE_TOKEN: token, BERTH_URL: url, BERTH_PROFILE: "" };
  const outputs: string[] = [];
  const cli = async (...args: string[]) => {
    const r = await runCli(args, env);
    outputs.push(r.stdout, r.stderr);
    return r;
  };

  const made = await cli("db", "create", "postgres", "main");
  assert.equal(made.code, 0, made.stderr);
  assert.match(made.stdout, /^created postgres database main: running\n/);
  assert.match(made.stdout, /secret DB_MAIN_URL \(secrets=\["DB_MAIN_URL"\]\), 127\.0\.0\.1:15432/);

  const cache = await cli("db", "create", "redis", "cache", "--memory", "256", "--json");
  assert.equal(cache.code, 0, cache.stderr);
  assert.deepEqual([JSON.parse(cache.stdout).engine, JSON.parse(cache.stdout).status], ["redis", "running"]);
  assert.equal(d.agent.runs.at(-1)?.memoryBytes, 256 * 1024 * 1024);

  const listed = await cli("db", "list", "--json");
  assert.deepEqual(
    JSON.parse(listed.stdout).map((x: { name: string }) => x.name),
    ["cache", "main"],
  );
  const table = await cli("db", "list");
  assert.match(table.stdout, /main\s+postgres\s+running\s+DB_MAIN_URL/);

  const stopped = await cli("db", "stop", "main");
  assert.equal(stopped.stdout, "stopped postgres database main: stopped\n");
  assert.match((await cli("db", "start", "main")).stdout, /^started postgres database main: running/);
  assert.match((await cli("db", "restart", "main")).stdout, /^restarted postgres database main: running/);
  assert.equal(JSON.parse((await cli("db", "get", "main", "--json")).stdout).status, "running");

  const bad = await cli("db", "create", "mysql", "x");
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /database engine "mysql" is not one berth runs: use postgres or redis/);
  const missing = await cli("db", "stop", "nope");
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /database nope not found/);

  assert.equal((await cli("db", "delete", "main")).stdout, "deleted database main (data kept)\n");
  assert.equal(
    (await cli("db", "delete", "cache", "--delete-data")).stdout,
    "deleted database cache and its data\n",
  );
  assert.deepEqual(d.removedVolumes, [`${d.w.ws}/db-cache`]);

  const url0 = (await d.secrets.resolve(d.w.ws, ["DB_MAIN_URL"])).DB_MAIN_URL as string;
  const password = /:([0-9a-f]{32})@/.exec(url0)?.[1] as string;
  assert.ok(password);
  assert.doesNotMatch(outputs.join(""), new RegExp(password), "no output carries the password");
});
