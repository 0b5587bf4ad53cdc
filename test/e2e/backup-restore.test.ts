// Backup, wipe, restore on a real `berth up` cluster, as docs/operations.md
// tells an operator: a deployment reading a secret and a volume file answers;
// `berth admin backup` while it runs; the cluster stopped and the
// coordinator's data directory and volume root wiped; `berth admin restore`;
// the cluster started again on the same directory. The deployment answers
// the same through a token made before the backup, the agent rejoins with its
// saved identity, and the workspace's records are all there.

import assert from "node:assert/strict";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const APP = `
import os
from berth import Volume, endpoint

@endpoint(name="kept", cpu="100m", memory="128Mi", secrets=["GREETING"],
          volumes=[Volume(name="kept-data", mount_path="./data")])
def kept():
    with open("./data/hello.txt") as f:
        return {"secret": os.environ["GREETING"], "file": f.read()}
`;

test("backup, wipe, restore: the deployment answers again with its secret and volume file", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "tar"] })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const cli = async (args: string[]) => {
    const r = await up.cli(args);
    assert.equal(r.code, 0, `berth ${args.join(" ")}: ${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  writeFileSync(join(up.appDir, "app.py"), APP);
  writeFileSync(join(up.appDir, "hello.txt"), "kept across a restore");
  await cli(["secret", "create", "GREETING", "hello from the store"]);
  await cli(["volume", "create", "kept-data"]);
  await cli(["volume", "put", "kept-data", "hello.txt", "hello.txt"]);
  await cli(["deploy", "app.py:kept"]);
  const made = JSON.parse(await cli(["token", "create", "--name", "before-backup", "--json"])) as {
    token: string;
  };
  const call = async (token: string) => {
    const r = await fetch(`${up.url}/endpoint/kept`, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    return { status: r.status, body: await r.text() };
  };
  const want = { secret: "hello from the store", file: "kept across a restore" };
  const before = await call(made.token);
  assert.equal(before.status, 200, before.body);
  assert.deepEqual(JSON.parse(before.body), want);

  const configFile = join(up.dataDir, "coordinator.json");
  const config = JSON.parse(readFileSync(configFile, "utf8")) as { dataDir: string; volumeRoot?: string };
  const archive = join(up.home, "backup.tar");
  await cli(["admin", "backup", "--config", configFile, archive]);

  await up.stop();
  rmSync(config.dataDir, { recursive: true, force: true });
  if (config.volumeRoot) rmSync(config.volumeRoot, { recursive: true, force: true });
  assert.equal(existsSync(config.dataDir), false);
  await cli(["admin", "restore", "--config", configFile, archive]);
  await up.start();

  const after = await call(made.token);
  assert.equal(after.status, 200, `${after.body}\nberth up:\n${up.output().slice(-4000)}`);
  assert.deepEqual(JSON.parse(after.body), want);
  const deployments = await cli(["deployment", "list", "--json"]);
  assert.match(deployments, /"name":\s*"kept"/);
  const agents = JSON.parse(await cli(["agent", "list", "--json"])) as { state: string }[];
  assert.deepEqual(
    agents.map((a) => a.state),
    ["ready"],
    "the agent rejoined with its saved identity",
  );
});
