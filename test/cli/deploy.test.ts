// `berth deploy` and `berth deployment ...`: the real CLI (child process),
// the real SDK's describe on a temp app.py, against a recording coordinator.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { gunzipSync } from "node:zlib";
import { cliEnv, ENDPOINT_APP, runCli, writeApp } from "./deploy-helpers.ts";
import { WS } from "./recording-coordinator.ts";

/** describe's archive dirs left in the CLI's TMPDIR (tsx keeps its own cache there). */
const leftovers = (tmp: string) => readdirSync(tmp).filter((n) => n.startsWith("berth-deploy-"));

/** File names in a tar archive (ustar headers; PAX records carry no names here). */
function tarNames(tgz: Buffer): string[] {
  const tar = gunzipSync(tgz);
  const names: string[] = [];
  for (let off = 0; off + 512 <= tar.length; ) {
    const name = tar
      .subarray(off, off + 100)
      .toString()
      .replace(/\0.*$/s, "");
    if (!name) break;
    const size = Number.parseInt(
      tar
        .subarray(off + 124, off + 136)
        .toString()
        .replace(/\0.*$/s, "")
        .trim() || "0",
      8,
    );
    const type = String.fromCharCode(tar[off + 156] ?? 48);
    if (type !== "x" && type !== "g") names.push(name);
    off += 512 + Math.ceil(size / 512) * 512;
  }
  return names;
}

test("deploy: describes, uploads the archive once, registers the deployment, prints version and URL", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  writeApp(c.dir, "VALUE = 1\n", "helper.py");
  writeApp(c.dir, "secret-stuff\n", "notes.txt");
  writeApp(c.dir, "notes.txt\n", ".berthignore");
  // Left out by the defaults: dependencies and build outputs next to the app.
  mkdirSync(join(c.dir, "node_modules", "left-pad"), { recursive: true });
  writeApp(c.dir, "module.exports = 1;\n", "node_modules/left-pad/index.js");
  mkdirSync(join(c.dir, "dist"), { recursive: true });
  writeApp(c.dir, "bundle\n", "dist/app.js");

  const r = await runCli(t, ["deploy", "app.py:hello"], c);
  assert.equal(r.code, 0, r.stderr);
  const dep = [...c.api.deployments.values()][0]!;
  assert.equal(r.stdout, `deployed hello version 1\nPOST JSON to ${c.api.url}/endpoint/hello/v1\n`);
  assert.match(r.stderr, /^code: \d+(\.\d)? (B|KiB) \(3 files\), uploaded\n$/);

  const puts = c.api.of("PUT", "/api/v1/gateway/objects/");
  assert.equal(puts.length, 1);
  const bytes = puts[0]!.bytes!;
  const sha = createHash("sha256").update(bytes).digest("hex");
  assert.equal(puts[0]!.path, `/api/v1/gateway/objects/${sha}`);
  assert.deepEqual(tarNames(bytes).sort(), [".berthignore", "app.py", "helper.py"]);

  const posts = c.api.of("POST", "/api/v1/gateway/deployments");
  assert.equal(posts.length, 1);
  const body = posts[0]!.json as {
    name: string;
    type: string;
    config: { handler: string; task_policy: { timeout: number } };
    extra: { code_sha256: string; handler_params: { names: string[] } };
    serve?: boolean;
  };
  assert.equal(body.name, "hello");
  assert.equal(body.type, "endpoint");
  assert.equal(body.config.handler, "app:hello");
  assert.equal(body.config.task_policy.timeout, 180);
  assert.equal(body.extra.code_sha256, sha);
  assert.deepEqual(body.extra.handler_params.names, ["name"]);
  assert.equal(body.serve, undefined);
  assert.equal(posts[0]!.auth, `Bearer ${c.api.token}`);
  assert.equal(dep.name, "hello");

  // Same code again: version 2, and the archive the coordinator has is not sent twice.
  const again = await runCli(t, ["deploy", "app.py:hello"], c);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /^deployed hello version 2\n/);
  assert.match(again.stderr, /^code: .* \(3 files\), already on the coordinator\n$/);
  assert.equal(c.api.of("PUT", "/api/v1/gateway/objects/").length, 1);
  assert.equal(c.api.of("GET", "/api/v1/gateway/objects/").length, 2);

  // --name overrides the decorator's; a task queue says how it is invoked.
  writeApp(
    c.dir,
    `from berth import task_queue\n\n@task_queue(name="jobs")\ndef work(x):\n    return x\n`,
    "jobs.py",
  );
  const q = await runCli(t, ["deploy", "jobs.py:work", "--name", "batch"], c);
  assert.equal(q.code, 0, q.stderr);
  assert.match(
    q.stdout,
    /^deployed batch version 1\nPOST JSON to http:\/\/127\.0\.0\.1:\d+\/taskqueue\/batch\/v1 to enqueue a task/,
  );
  assert.equal(
    (c.api.of("POST", "/api/v1/gateway/deployments").at(-1)!.json as { type: string }).type,
    "taskqueue",
  );

  // No temp archive left behind.
  assert.deepEqual(leftovers(c.tmp), []);
});

test("deploy: a describe failure exits 2 with its message (and traceback); nothing is uploaded", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  const missing = await runCli(t, ["deploy", "app.py:nope"], c);
  assert.equal(missing.code, 2);
  assert.equal(missing.stderr, "berth: app.py has no object named nope; its deployable objects: hello\n");
  assert.equal(missing.stdout, "");

  const noFile = await runCli(t, ["deploy", "absent.py:hello"], c);
  assert.equal(noFile.code, 2);
  assert.equal(noFile.stderr, "berth: no such file: absent.py\n");

  writeApp(c.dir, "import no_such_module_here\n", "broken.py");
  const broken = await runCli(t, ["deploy", "broken.py:hello"], c);
  assert.equal(broken.code, 2);
  assert.match(
    broken.stderr,
    /^berth: cannot import .*broken\.py: ModuleNotFoundError: No module named 'no_such_module_here'\n/,
  );
  assert.match(broken.stderr, /Traceback \(most recent call last\):/);

  // A file named like a module berth imports is refused by name, not a confusing import error.
  writeApp(c.dir, ENDPOINT_APP, "queue.py");
  const shadow = await runCli(t, ["deploy", "queue.py:hello"], c);
  assert.equal(shadow.code, 2);
  assert.equal(
    shadow.stderr,
    "berth: queue.py has the name of the module 'queue' that Python or berth uses: rename it\n",
  );

  const form = await runCli(t, ["deploy", "app.py"], c);
  assert.equal(form.code, 2);
  assert.match(form.stderr, /is not of the form FILE\.py:OBJECT/);

  assert.equal(c.api.requests.length, 0);
  assert.deepEqual(leftovers(c.tmp), []);
});

test("deploy: a code archive over the limit (BERTH_CODE_SYNC_MAX) is refused before any upload, naming its largest files", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  // Random bytes do not compress: the archive is over 64 KiB.
  writeApp(c.dir, randomBytes(200 * 1024).toString("base64"), "weights.txt");
  const r = await runCli(t, ["deploy", "app.py:hello"], {
    ...c,
    env: { ...c.env, BERTH_CODE_SYNC_MAX: "64KiB" },
  });
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /over the 64\.0 KiB code sync limit/);
  assert.match(r.stderr, /weights\.txt \(\d+\.\d KiB\)/);
  assert.match(r.stderr, /\.berthignore/);
  assert.match(r.stderr, /BERTH_CODE_SYNC_MAX/);
  assert.equal(c.api.of("PUT", "/api/v1/gateway/objects/").length, 0);
  assert.equal(c.api.of("POST", "/api/v1/gateway/deployments").length, 0);

  const bad = await runCli(t, ["deploy", "app.py:hello"], {
    ...c,
    env: { ...c.env, BERTH_CODE_SYNC_MAX: "lots" },
  });
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /BERTH_CODE_SYNC_MAX must be a size such as 50MiB/);
});

test("deploy: the coordinator's refusal is printed and exits 1; no token is a clear error", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  const refused = await runCli(t, ["deploy", "app.py:hello", "--name", "refused"], c);
  assert.equal(refused.code, 1);
  assert.equal(refused.stderr, "berth: refused is a name this coordinator refuses\n");

  const noToken = await runCli(t, ["deploy", "app.py:hello"], { ...c, env: { ...c.env, SERVICE_TOKEN: "" } });
  assert.equal(noToken.code, 1);
  assert.match(
    noToken.stderr,
    /^berth: no token: run `berth configure default --token T`, or set SERVICE_TOKEN\n$/,
  );
  assert.deepEqual(leftovers(c.tmp), []);
});

test("deployment list/stop/start/delete call the REST routes of the token's workspace", async (t) => {
  const c = await cliEnv(t);
  writeApp(c.dir, ENDPOINT_APP);
  for (const name of ["hello", "hello", "other"]) {
    const r = await runCli(t, ["deploy", "app.py:hello", "--name", name], c);
    assert.equal(r.code, 0, r.stderr);
  }
  const list = await runCli(t, ["deployment", "list"], c);
  assert.equal(list.code, 0, list.stderr);
  const lines = list.stdout.trimEnd().split("\n");
  assert.match(lines[0]!, /^ID\s+NAME\s+VERSION\s+KIND\s+ACTIVE\s+URL\s+CREATED$/);
  assert.deepEqual(
    lines.slice(1).map((l) => l.split(/\s+/).slice(0, 5)),
    [
      ["dep_3", "other", "1", "endpoint", "yes"],
      ["dep_2", "hello", "2", "endpoint", "yes"],
      ["dep_1", "hello", "1", "endpoint", "yes"],
    ],
  );
  const byName = await runCli(t, ["deployment", "list", "--name", "hello", "--json"], c);
  assert.equal(byName.code, 0, byName.stderr);
  assert.deepEqual(
    (JSON.parse(byName.stdout) as { id: string }[]).map((d) => d.id),
    ["dep_2", "dep_1"],
  );
  assert.equal(c.api.of("GET", `/api/v1/deployment/${WS}`).at(-1)!.query.get("name"), "hello");

  const stop = await runCli(t, ["deployment", "stop", "dep_1"], c);
  assert.equal(stop.code, 0, stop.stderr);
  assert.equal(stop.stdout, "stopped hello version 1 (dep_1)\n");
  assert.equal(c.api.deployments.get("dep_1")!.active, false);
  assert.equal(c.api.of("POST", `/api/v1/deployment/${WS}/stop/dep_1`).length, 1);

  const start = await runCli(t, ["deployment", "start", "dep_1"], c);
  assert.equal(start.code, 0, start.stderr);
  assert.equal(start.stdout, "started hello version 1 (dep_1)\n");
  assert.equal(c.api.deployments.get("dep_1")!.active, true);

  const del = await runCli(t, ["deployment", "delete", "dep_2"], c);
  assert.equal(del.code, 0, del.stderr);
  assert.equal(del.stdout, "deleted dep_2\n");
  assert.equal(c.api.of("DELETE", `/api/v1/deployment/${WS}/dep_2`).length, 1);
  assert.ok(!c.api.deployments.has("dep_2"));

  const gone = await runCli(t, ["deployment", "stop", "dep_2"], c);
  assert.equal(gone.code, 1);
  assert.equal(gone.stderr, "berth: deployment dep_2 not found\n");
});
