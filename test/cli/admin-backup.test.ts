// `berth admin backup` and `restore` (the real CLI in a child process) on a
// running coordinator: back up, stop and wipe its data directory, restore,
// and start a coordinator on the restored directory. Workspaces, tokens,
// deployment records, secrets (the key came back), code archives and volume
// files are all there. No deployment is run: the records and a token that
// authenticates against the restored coordinator are what is checked.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import pino from "pino";
import { startCoordinator } from "../../coordinator/main.ts";
import { resolveCoordinatorOptions } from "../../coordinator/options.ts";
import { freePort } from "../../shared/net.ts";
import { bearer } from "../helpers/auth.ts";
import { startTestCluster } from "../helpers/cluster.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestPostgres } from "../helpers/postgres.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

const CLI_BIN = new URL("../../cli/bin.js", import.meta.url).pathname;
const exec = promisify(execFile);

async function berth(args: string[]): Promise<{ code: number; out: string }> {
  try {
    const r = await exec(process.execPath, [CLI_BIN, ...args], { timeout: 120_000 });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, out: `${err.stdout ?? ""}${err.stderr ?? ""}` };
  }
}

test("backup, wipe, restore: workspaces, tokens, deployments, secrets, objects and volume files come back", async (t) => {
  if (!needs(t, { commands: ["nats-server", "tar"] })) return;
  const cluster = await startTestCluster(t);
  const dataDir = join(cluster.dir, "coordinator");
  const store = cluster.coordinator.store;
  const out = tempDir(t, "berth-backup-");

  // What the coordinator holds: a second workspace with its own token, a sealed secret, a deployment.
  const ws = await store.workspaces.create("restored-team");
  const { secret: wsToken } = await store.tokens.create(ws.id, { name: "ci" });
  await cluster.coordinator.secrets.create(ws.id, "API_KEY", "value-only-the-key-opens");
  const { stub } = await store.stubs.upsert(ws.id, {
    name: "app/v1",
    type: "endpoint/deployment",
    config: stubConfig(),
    extra: stubExtra({}),
    objectId: null,
  });
  const at = new Date().toISOString();
  const dep = await store.deployments.reserveVersion(ws.id, "app", "endpoint", at);
  await store.deployments.attachStub(dep.id, stub.id, at);
  // A code archive in the object store and a file on a volume, as the coordinator lays them out.
  const blob = Buffer.from("a code archive's bytes");
  const sha = createHash("sha256").update(blob).digest("hex");
  mkdirSync(join(dataDir, "objects", "sha256", sha.slice(0, 2)), { recursive: true });
  writeFileSync(join(dataDir, "objects", "sha256", sha.slice(0, 2), sha), blob);
  const volumeFile = join(dataDir, "volumes", ws.id, "weights", "model.bin");
  mkdirSync(join(volumeFile, ".."), { recursive: true });
  writeFileSync(volumeFile, "volume bytes");

  // Online: the coordinator keeps running while the store is copied.
  const archive = join(out, "berth.tar");
  const b = await berth(["admin", "backup", archive, "--data-dir", dataDir]);
  assert.equal(b.code, 0, b.out);
  assert.match(b.out, /wrote .*berth\.tar: \d+ files, \d+ bytes, store schema \d{4}_/);
  assert.equal(statSync(archive).mode & 0o777, 0o600);

  await cluster.coordinator.stop();
  rmSync(dataDir, { recursive: true, force: true });

  const r = await berth(["admin", "restore", archive, "--data-dir", dataDir]);
  assert.equal(r.code, 0, r.out);
  assert.equal(statSync(join(dataDir, "keys", "secrets.key")).mode & 0o777, 0o600);
  // A second restore over the restored directory is refused without --force, and leaves it as it is.
  const again = await berth(["admin", "restore", archive, "--data-dir", dataDir]);
  assert.equal(again.code, 1);
  assert.match(again.out, /already holds data: restore into a fresh data directory .* give --force/);
  assert.equal(readFileSync(volumeFile, "utf8"), "volume bytes");
  const forced = await berth(["admin", "restore", archive, "--data-dir", dataDir, "--force"]);
  assert.equal(forced.code, 0, forced.out);

  const restored = await startCoordinator(
    resolveCoordinatorOptions({
      host: "127.0.0.1",
      port: await freePort(),
      dataDir,
      nats: { url: cluster.nats.url, user: "coordinator", password: cluster.nats.coordinator.password },
      agentNats: { url: cluster.nats.url, user: "agent", password: cluster.nats.agent.password },
    }),
    pino({ level: "silent" }),
  );
  t.after(() => restored.stop());

  // Tokens authenticate against the restored coordinator: the admin's and the workspace's own.
  const admin = await fetch(`${restored.url}/api/v1/workspace/current`, {
    headers: bearer(cluster.adminToken),
  });
  assert.equal(admin.status, 200);
  const current = await fetch(`${restored.url}/api/v1/workspace/current`, { headers: bearer(wsToken) });
  assert.equal(current.status, 200);
  assert.equal(((await current.json()) as { name: string }).name, "restored-team");
  // The secret opens with the restored key; the deployment record is there, active.
  assert.deepEqual(await restored.secrets.resolve(ws.id, ["API_KEY"]), {
    API_KEY: "value-only-the-key-opens",
  });
  const deps = await restored.store.deployments.list(ws.id);
  assert.deepEqual(
    deps.map((d) => [d.id, d.name, d.version, d.active]),
    [[dep.id, "app", 1, true]],
  );
  assert.deepEqual(readFileSync(join(dataDir, "objects", "sha256", sha.slice(0, 2), sha)), blob);
  assert.equal(readFileSync(volumeFile, "utf8"), "volume bytes");
});

test("restore refuses a damaged archive and changes nothing", async (t) => {
  if (!needs(t, { commands: ["tar"] })) return;
  const dir = tempDir(t, "berth-backup-");
  const dataDir = join(dir, "data");
  // A store made by this berth, then backed up.
  const { Store } = await import("../../coordinator/records.ts");
  await (await Store.open(`sqlite:${join(dataDir, "berth.db")}`)).close();
  writeFileSync(join(dataDir, "admin-token"), "tok");
  const archive = join(dir, "b.tar");
  assert.equal((await berth(["admin", "backup", archive, "--data-dir", dataDir])).code, 0);
  // Damage one file inside it: extract, change, pack again.
  const x = join(dir, "x");
  mkdirSync(x);
  await exec("tar", ["-xf", archive, "-C", x]);
  writeFileSync(join(x, "data", "admin-token"), "tampered");
  const damaged = join(dir, "damaged.tar");
  await exec("tar", ["-cf", damaged, "-C", x, "."]);
  const fresh = join(dir, "fresh");
  const r = await berth(["admin", "restore", damaged, "--data-dir", fresh]);
  assert.equal(r.code, 1);
  assert.match(r.out, /the backup is damaged: data\/admin-token does not match its checksum/);
  assert.throws(() => statSync(fresh), /ENOENT/);
});

test("a PostgreSQL store goes through pg_dump and pg_restore into an empty database", async (t) => {
  if (!needs(t, { commands: ["tar", "pg_dump", "pg_restore", "psql"] })) return;
  const pg = await startTestPostgres(t);
  const dir = tempDir(t, "berth-backup-");
  const dataDir = join(dir, "data");
  const { Store } = await import("../../coordinator/records.ts");
  const store = await Store.open(pg.url);
  const ws = await store.workspaces.create("pg-team");
  const { secret } = await store.tokens.create(ws.id, { name: "ci" });
  await store.close();
  mkdirSync(join(dataDir, "keys"), { recursive: true });
  writeFileSync(join(dataDir, "keys", "secrets.key"), Buffer.alloc(32, 7));

  const archive = join(dir, "pg.tar");
  const b = await berth(["admin", "backup", archive, "--data-dir", dataDir, "--store", pg.url]);
  assert.equal(b.code, 0, b.out);

  // A second, empty database on the same server.
  const target = new URL(pg.url);
  await exec("psql", ["--no-psqlrc", "-c", "CREATE DATABASE restored", "--dbname", pg.url]);
  target.pathname = "/restored";
  const restoredDir = join(dir, "restored");
  const r = await berth([
    "admin",
    "restore",
    archive,
    "--data-dir",
    restoredDir,
    "--store",
    target.toString(),
  ]);
  assert.equal(r.code, 0, r.out);
  const restored = await Store.open(target.toString());
  try {
    assert.equal((await restored.workspaces.get(ws.id))?.name, "pg-team");
    assert.equal((await restored.tokens.authenticate(secret))?.workspace.id, ws.id);
  } finally {
    await restored.close();
  }
  assert.deepEqual(readFileSync(join(restoredDir, "keys", "secrets.key")), Buffer.alloc(32, 7));
  // Its tables are there now: without --force a restore refuses it.
  const again = await berth([
    "admin",
    "restore",
    archive,
    "--data-dir",
    join(dir, "third"),
    "--store",
    target.toString(),
  ]);
  assert.equal(again.code, 1);
  assert.match(again.out, /restored already holds data/);
});
