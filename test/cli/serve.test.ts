// `berth serve`: the real CLI (child process) and the real SDK's describe
// against a recording coordinator: reload on edit, logs forwarded, the
// deployment deleted on Ctrl-C and when idle.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { waitUntil } from "../helpers/wait.ts";
import { cliEnv, ENDPOINT_APP, spawnCli, writeApp } from "./deploy-helpers.ts";
import { WS } from "./recording-coordinator.ts";

interface DeployBody {
  name: string;
  serve?: boolean;
  extra: { code_sha256: string };
}

test("serve: edits reload (new code), a broken edit keeps the last good version, Ctrl-C deletes and exits 0", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  const s = spawnCli(t, ["serve", "app.py:hello"], c);
  const out = () => `${s.output().stdout}${s.output().stderr}`;
  const deploys = () =>
    c.api.of("POST", "/api/v1/gateway/deployments").map((r) => r.json as unknown as DeployBody);

  await waitUntil(() => c.api.logStreams.has("dep_1"), {
    what: "the log stream",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  assert.match(
    s.output().stdout,
    /^serving hello \(dep_1\)\nPOST JSON to http:\/\/127\.0\.0\.1:\d+\/endpoint\/hello\n/,
  );
  assert.equal(deploys().length, 1);
  assert.equal(deploys()[0]!.serve, true);
  const firstSha = deploys()[0]!.extra.code_sha256;

  c.api.log("dep_1", "ctr-0123456789abcdef", "hello from the container");
  c.api.log("dep_1", "ctr-0123456789abcdef", "a warning", "stderr");
  await waitUntil(() => s.output().stderr.includes("ctr-01234567 | a warning"), {
    what: "the forwarded lines",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  assert.match(s.output().stdout, /^ctr-01234567 \| hello from the container$/m);

  // The stream ends (a coordinator restart): the CLI opens it again; the replayed lines are not printed twice.
  const opened = c.api.of("GET", "/api/v1/gateway/deployments/dep_1/logs").length;
  assert.equal(c.api.of("GET", "/api/v1/gateway/deployments/dep_1/logs")[0]!.query.get("follow"), "1");
  c.api.endLogStreams("dep_1");
  await waitUntil(() => c.api.of("GET", "/api/v1/gateway/deployments/dep_1/logs").length > opened, {
    what: "the reconnect",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  await waitUntil(() => (c.api.logStreams.get("dep_1") ?? []).length === 1, {
    what: "the new stream",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  c.api.log("dep_1", "ctr-0123456789abcdef", "after the reconnect");
  await waitUntil(() => s.output().stdout.includes("after the reconnect"), {
    what: "the line after the reconnect",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  assert.equal(s.output().stdout.split("hello from the container").length, 2, s.output().stdout);
  assert.equal(s.output().stderr.split("a warning").length, 2, s.output().stderr);

  writeApp(c.dir, ENDPOINT_APP.replace('"hello": name', '"hi": name'));
  await waitUntil(() => deploys().length === 2, {
    what: "the re-sync",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  const second = deploys()[1]!;
  assert.equal(second.serve, true);
  assert.equal(second.name, "hello");
  assert.notEqual(second.extra.code_sha256, firstSha);
  assert.ok(c.api.objects.has(second.extra.code_sha256), "the new archive was uploaded before the deploy");
  await waitUntil(() => /^reloaded hello \(code [0-9a-f]{12}\)$/m.test(s.output().stdout), {
    what: "reloaded",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });

  // A file in a new subdirectory counts too.
  mkdirSync(join(c.dir, "lib"));
  writeApp(c.dir, "def f():\n    return 1\n", "lib/util.py");
  await waitUntil(() => deploys().length === 3, {
    what: "the re-sync of a new file",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });

  writeApp(c.dir, "def broken(:\n");
  await waitUntil(() => s.output().stderr.includes("reload failed"), {
    what: "the reload failure",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  assert.match(s.output().stderr, /still serving the last good version/);
  assert.equal(deploys().length, 3);
  assert.equal(s.child.exitCode, null);

  writeApp(c.dir, ENDPOINT_APP);
  await waitUntil(() => deploys().length === 4, {
    what: "the fixed re-sync",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: out,
  });
  assert.notEqual(deploys()[3]!.extra.code_sha256, deploys()[2]!.extra.code_sha256);

  s.child.kill("SIGINT");
  assert.equal(await s.exited, 0, out());
  assert.equal(c.api.of("DELETE", `/api/v1/deployment/${WS}/dep_1`).length, 1);
  assert.equal(c.api.deployments.size, 0);
  assert.match(s.output().stdout, /^deleted hello \(dep_1\)$/m);
});

test("serve: ends on its own after --idle-timeout without requests, deleting the deployment", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  const s = spawnCli(t, ["serve", "app.py:hello", "--idle-timeout", "1"], c);
  assert.equal(await s.exited, 0, s.output().stderr);
  assert.match(s.output().stdout, /^no request for 1 s: stopping$/m);
  assert.equal(c.api.of("DELETE", `/api/v1/deployment/${WS}/dep_1`).length, 1);
  assert.ok(c.api.of("GET", `/api/v1/deployment/${WS}/dep_1`).length >= 1, "it polled the record");
  assert.equal(c.api.deployments.size, 0);
});

test("serve: requests (last_request_at moving) keep the session alive; SIGTERM ends it like Ctrl-C", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  const s = spawnCli(t, ["serve", "app.py:hello", "--idle-timeout", "1"], c);
  await waitUntil(() => c.api.deployments.has("dep_1"), {
    what: "the deployment",
    timeoutMs: 30_000,
    intervalMs: 50,
    describe: () => s.output().stderr,
  });
  // Three idle timeouts' worth of requests, each seen by a poll.
  for (let i = 0; i < 30; i++) {
    const d = c.api.deployments.get("dep_1");
    assert.ok(d, `the session ended although requests kept coming: ${s.output().stdout}`);
    d.last_request_at = new Date(Date.now() + i).toISOString();
    await waitUntil(() => c.api.of("GET", `/api/v1/deployment/${WS}/dep_1`).length > i, {
      what: "a poll",
      timeoutMs: 30_000,
      intervalMs: 50,
    });
  }
  assert.equal(s.child.exitCode, null);
  s.child.kill("SIGTERM");
  assert.equal(await s.exited, 0, s.output().stderr);
  assert.doesNotMatch(s.output().stdout, /no request for/);
  assert.equal(c.api.deployments.size, 0);
});

test("serve: a describe failure at the start exits 2 and registers nothing; a bad --idle-timeout is refused", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  const s = spawnCli(t, ["serve", "app.py:nope"], c);
  assert.equal(await s.exited, 2);
  assert.equal(s.output().stderr, "berth: app.py has no object named nope; its deployable objects: hello\n");
  const bad = spawnCli(t, ["serve", "app.py:hello", "--idle-timeout", "soon"], c);
  assert.equal(await bad.exited, 1);
  assert.match(bad.output().stderr, /--idle-timeout must be a number of seconds > 0, got "soon"/);
  assert.equal(c.api.requests.length, 0);
});
