import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { runCli, startTestCluster } from "../helpers/cluster.ts";
import { needs, tempDir } from "../helpers/env.ts";

test("CLI: configure, workspace create, token create/list/revoke, SERVICE_TOKEN and BERTH_URL", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const c = await startTestCluster(t);
  const home = tempDir(t, "berth-home-");
  const env = { HOME: home, SERVICE_TOKEN: "", BERTH_URL: "", BERTH_PROFILE: "" };

  const conf = await runCli(["configure", "default", "--token", c.adminToken, "--url", `${c.url}/`], env);
  assert.equal(conf.code, 0, conf.stderr);
  const saved = JSON.parse(readFileSync(join(home, ".berth", "config.json"), "utf8"));
  assert.deepEqual(saved.profiles.default, { token: c.adminToken, url: c.url });

  const created = await runCli(["workspace", "create", "team-a", "--json"], env);
  assert.equal(created.code, 0, created.stderr);
  const { workspace, token } = JSON.parse(created.stdout) as { workspace: { name: string }; token: string };
  assert.equal(workspace.name, "team-a");

  // SERVICE_TOKEN overrides the profile's token.
  const asTeam = { ...env, SERVICE_TOKEN: token };
  const cur = await runCli(["workspace", "current", "--json"], asTeam);
  assert.equal(JSON.parse(cur.stdout).name, "team-a");

  const made = await runCli(["token", "create", "--name", "ci", "--json"], asTeam);
  const { token: second, token_info } = JSON.parse(made.stdout) as {
    token: string;
    token_info: { id: string };
  };
  const list = await runCli(["token", "list"], asTeam);
  assert.match(list.stdout, new RegExp(`${token_info.id}\\s+ci\\s+\\S+\\s+developer\\s+all\\s+false\\s+active`));
  assert.ok(!list.stdout.includes(second), "secrets are never listed");

  const rv = await runCli(["token", "revoke", token_info.id], asTeam);
  assert.equal(rv.code, 0, rv.stderr);
  const denied = await runCli(["workspace", "current"], { ...env, SERVICE_TOKEN: second });
  assert.equal(denied.code, 1);
  assert.equal(denied.stderr, "berth: unknown or revoked token\n");

  // A workspace token cannot create workspaces; BERTH_URL overrides the profile's URL.
  const noAdmin = await runCli(["workspace", "create", "nope"], asTeam);
  assert.equal(noAdmin.stderr, "berth: this route needs a cluster admin token; this token's role is admin\n");
  const wrongUrl = await runCli(["workspace", "current"], { ...env, BERTH_URL: "http://127.0.0.1:1" });
  assert.equal(wrongUrl.code, 1);
  assert.match(wrongUrl.stderr, /^berth: cannot reach http:\/\/127\.0\.0\.1:1: /);
});
