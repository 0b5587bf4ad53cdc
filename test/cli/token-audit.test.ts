// `berth token create --role ROLE --deployment NAME` and `berth audit`
// against the coordinator's real HTTP app on a loopback port: the role and
// deployments reach the token, and the change shows in the audit trail.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { runCli } from "../helpers/cluster.ts";
import { type HttpHarness, cliEnv, startHttpHarness } from "../http/harness.ts";
import { teardownStack } from "../helpers/suite.ts";

describe("berth token create --role and berth audit", () => {
  let x: HttpHarness;
  let env: NodeJS.ProcessEnv;
  const { later: hooks } = teardownStack({ after });
  before(async () => {
    x = await startHttpHarness(hooks);
    const admin = await x.h.store.tokens.create(x.a.id, { name: "cli-admin", role: "admin" });
    env = await cliEnv(x, hooks, admin.secret);
  });

  test("a narrowed runner token, listed with its role, and the audit trail that shows it", async () => {
    const made = await runCli(
      ["token", "create", "--name", "web", "--role", "runner", "--deployment", "shop", "--json"],
      env,
    );
    assert.equal(made.code, 0, made.stderr);
    const info = JSON.parse(made.stdout).token_info;
    assert.deepEqual([info.role, info.deployments, info.admin], ["runner", ["shop"], false]);
    const plain = await runCli(["token", "create", "--role", "viewer"], env);
    assert.match(plain.stdout, /^created viewer token tok-/);
    const bad = await runCli(["token", "create", "--role", "owner"], env);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /Allowed choices are admin, developer, runner, viewer/);

    const list = await runCli(["token", "list"], env);
    assert.match(list.stdout, new RegExp(`${info.id}\\s+web\\s+\\S+\\s+runner\\s+shop\\s+false\\s+active`));

    const audit = await runCli(["audit", "--action", "token.create"], env);
    assert.equal(audit.code, 0, audit.stderr);
    assert.match(audit.stdout, /cli-admin \(admin\)\s+token\.create\s+web\s+ok\s+127\.0\.0\.1/);
    const json = JSON.parse((await runCli(["audit", "--json", "--limit", "1"], env)).stdout);
    assert.equal(json.records.length, 1);
    assert.equal(typeof json.next_cursor, "string");
  });
});
