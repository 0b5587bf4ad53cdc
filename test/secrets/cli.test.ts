// `berth secret ...` (the real CLI, as a child process) against a real
// coordinator: nats-server plus startCoordinator, its key file in the data dir.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { CLI_MAIN, runCli, startTestCluster } from "../helpers/cluster.ts";
import { needs, tempDir } from "../helpers/env.ts";

/** Runs the CLI with `input` on its stdin. */
async function runCliWithStdin(args: string[], input: Buffer, env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, ["--import", "tsx", CLI_MAIN, ...args], {
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  child.stdin?.end(input);
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  clearTimeout(timer);
  return { code, stdout, stderr };
}

test("berth secret create/list/update/delete against a coordinator; values never printed", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const c = await startTestCluster(t);
  // The coordinator made its key file on first start.
  const keyFile = join(c.dir, "coordinator", "keys", "secrets.key");
  assert.equal(statSync(keyFile).mode & 0o777, 0o600);
  assert.equal(statSync(keyFile).size, 32);

  const store = c.coordinator.store;
  const ws = await store.workspaces.create("cli-secrets");
  const token = (await store.tokens.create(ws.id)).secret;
  const env = { HOME: tempDir(t), SERVICE_TOKEN: token, BERTH_URL: c.url, BERTH_PROFILE: "" };
  const resolve = (names: string[]) => c.coordinator.secrets.resolve(ws.id, names);

  const made = await runCli(["secret", "create", "HF_TOKEN", "hf_argument_value"], env);
  assert.equal(made.code, 0, made.stderr);
  assert.equal(made.stdout, "created secret HF_TOKEN\n");
  assert.deepEqual(await resolve(["HF_TOKEN"]), { HF_TOKEN: "hf_argument_value" });

  const dup = await runCli(["secret", "create", "HF_TOKEN", "again"], env);
  assert.equal(dup.code, 1);
  assert.match(
    dup.stderr,
    /^berth: secret HF_TOKEN already exists in this workspace; update it to change its value\n$/,
  );

  // From a file, byte for byte (the trailing newline stays).
  const file = join(tempDir(t), "pem");
  writeFileSync(file, "-----BEGIN KEY-----\nabc\n-----END KEY-----\n");
  const fromFile = await runCli(["secret", "create", "TLS_KEY", "--from-file", file], env);
  assert.equal(fromFile.code, 0, fromFile.stderr);
  assert.deepEqual(await resolve(["TLS_KEY"]), { TLS_KEY: "-----BEGIN KEY-----\nabc\n-----END KEY-----\n" });

  const fromStdin = await runCliWithStdin(
    ["secret", "create", "DB_PASSWORD", "--from-file", "-"],
    Buffer.from("pässwörd"),
    env,
  );
  assert.equal(fromStdin.code, 0, fromStdin.stderr);
  assert.deepEqual(await resolve(["DB_PASSWORD"]), { DB_PASSWORD: "pässwörd" });

  const list = await runCli(["secret", "list"], env);
  assert.equal(list.code, 0, list.stderr);
  const lines = list.stdout.trim().split("\n");
  assert.match(lines[0] ?? "", /^NAME\s+CREATED_AT\s+UPDATED_AT$/);
  assert.deepEqual(
    lines.slice(1).map((l) => l.split(/\s+/)[0]),
    ["DB_PASSWORD", "HF_TOKEN", "TLS_KEY"],
  );
  for (const v of ["hf_argument_value", "pässwörd", "BEGIN KEY"]) assert.ok(!list.stdout.includes(v));
  const json = JSON.parse((await runCli(["secret", "list", "--json"], env)).stdout) as { name: string }[];
  assert.deepEqual(
    json.map((s) => s.name),
    ["DB_PASSWORD", "HF_TOKEN", "TLS_KEY"],
  );

  const upd = await runCliWithStdin(
    ["secret", "update", "HF_TOKEN", "--from-file", "-"],
    Buffer.from("hf_rotated"),
    env,
  );
  assert.equal(upd.code, 0, upd.stderr);
  assert.equal(upd.stdout, "updated secret HF_TOKEN\n");
  assert.deepEqual(await resolve(["HF_TOKEN"]), { HF_TOKEN: "hf_rotated" });
  const updArg = await runCli(["secret", "update", "HF_TOKEN", "hf_arg2"], env);
  assert.equal(updArg.code, 0, updArg.stderr);
  assert.deepEqual(await resolve(["HF_TOKEN"]), { HF_TOKEN: "hf_arg2" });

  const del = await runCli(["secret", "delete", "TLS_KEY"], env);
  assert.equal(del.code, 0, del.stderr);
  assert.equal(del.stdout, "deleted secret TLS_KEY\n");
  const delAgain = await runCli(["secret", "delete", "TLS_KEY"], env);
  assert.equal(delAgain.code, 1);
  assert.equal(delAgain.stderr, "berth: secret TLS_KEY not found\n");
  const updMissing = await runCli(["secret", "update", "TLS_KEY", "x"], env);
  assert.equal(updMissing.stderr, "berth: secret TLS_KEY not found\n");
});

test("berth secret: bad input fails with one line naming the cause", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const c = await startTestCluster(t);
  const ws = await c.coordinator.store.workspaces.create("cli-bad");
  const env = {
    HOME: tempDir(t),
    SERVICE_TOKEN: (await c.coordinator.store.tokens.create(ws.id)).secret,
    BERTH_URL: c.url,
    BERTH_PROFILE: "",
  };
  const cases: [string[], RegExp][] = [
    [
      ["secret", "create", "NO_VALUE"],
      /^berth: give the value of NO_VALUE as an argument or with --from-file PATH \(- for stdin\)\n$/,
    ],
    [
      ["secret", "create", "BOTH", "v", "--from-file", "/x"],
      /either as an argument or with --from-file, not both/,
    ],
    [
      ["secret", "create", "GONE", "--from-file", "/nonexistent/file"],
      /^berth: cannot read the value of GONE from \/nonexistent\/file: .*ENOENT/,
    ],
    [
      ["secret", "create", "bad-name", "v"],
      /^berth: secret name "bad-name" is not an environment variable name/,
    ],
    [["secret", "create", "BERTH_X", "v"], /reserved: berth sets the BERTH_\* variables itself/],
  ];
  for (const [args, stderr] of cases) {
    const r = await runCli(args, env);
    assert.equal(r.code, 1, args.join(" "));
    assert.match(r.stderr, stderr, args.join(" "));
    assert.equal(r.stderr.split("\n").length, 2, "one line");
  }
  const binary = await runCliWithStdin(
    ["secret", "create", "BIN", "--from-file", "-"],
    Buffer.from([0xff, 0xfe, 0x00]),
    env,
  );
  assert.equal(binary.code, 1);
  assert.match(binary.stderr, /^berth: the value of BIN from stdin is not UTF-8 text/);
  assert.deepEqual(await c.coordinator.secrets.list(ws.id), []);
});
