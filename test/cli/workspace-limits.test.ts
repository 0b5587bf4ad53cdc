// `berth workspace limits WS --max-gpus-type TYPE=N` against the
// coordinator's real HTTP app (limits routes on the harness's store): the
// flag is repeatable, changes one type and keeps the others, `TYPE=none`
// drops one and `none` all; the table shows each type's limit and use, and
// the GPU-hours budget; --user-namespace and --syscall-filter opt a
// workspace out and back in.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createLimits } from "../../coordinator/limits/index.ts";
import { runCli } from "../helpers/cluster.ts";
import { type HttpHarness, cliEnv, startHttpHarness } from "../http/harness.ts";
import { teardownStack } from "../helpers/suite.ts";

describe("berth workspace limits --max-gpus-type", () => {
  let x: HttpHarness;
  let env: NodeJS.ProcessEnv;
  const { later: hooks } = teardownStack({ after });
  before(async () => {
    x = await startHttpHarness(hooks, {
      more: async (h) => {
        const limits = createLimits({ repo: h.store.limits, workspaces: h.store.workspaces });
        limits.service.report({
          containers: () => ({
            containers: 1,
            cpuMillicores: 1000,
            memoryBytes: 0,
            gpus: 1,
            gpusByType: { "A100:1g.10gb": 1 },
          }),
        });
        return { routes: [limits.routes] };
      },
    });
    const admin = await x.h.store.tokens.create(x.a.id, { name: "ops", admin: true });
    env = await cliEnv(x, hooks, admin.secret);
  });

  test("sets, merges, drops and shows limits by GPU type; a bad value is refused by the parser", async () => {
    const ws = x.a.externalId;
    const set = await runCli(
      ["workspace", "limits", ws, "--max-gpus-type", "A100=2", "--max-gpus-type", "H100=1", "--json"],
      env,
    );
    assert.equal(set.code, 0, set.stderr);
    assert.deepEqual(JSON.parse(set.stdout).limits.max_gpus_by_type, { A100: 2, H100: 1 });

    const merged = await runCli(
      ["workspace", "limits", ws, "--max-gpus-type", "a100=3", "--max-gpus-type", "H100=none"],
      env,
    );
    assert.equal(merged.code, 0, merged.stderr);
    // The A100 limit counts the A100 MIG slice the workspace holds.
    assert.match(merged.stdout, /\nmax_gpus_by_type a100\s+3\s+1\n/);
    assert.doesNotMatch(merged.stdout, /H100/);
    assert.deepEqual((await x.h.store.limits.get(x.a.id)).maxGpusByType, { a100: 3 });

    const budget = await runCli(["workspace", "limits", ws, "--gpu-hours-per-month", "500"], env);
    assert.equal(budget.code, 0, budget.stderr);
    assert.match(budget.stdout, /\ngpu_hours_per_month\s+500\s+0\n/);

    const cleared = await runCli(["workspace", "limits", ws, "--max-gpus-type", "none", "--json"], env);
    assert.equal(JSON.parse(cleared.stdout).limits.max_gpus_by_type, null);

    const bad = await runCli(["workspace", "limits", ws, "--max-gpus-type", "A100"], env);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /TYPE=N/);
  });

  test("--v1-tokens-per-month sets the /v1 token budget, shows it with this month's use, none removes it", async () => {
    const ws = x.a.externalId;
    const set = await runCli(["workspace", "limits", ws, "--v1-tokens-per-month", "2000000"], env);
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /\nv1_tokens_per_month\s+2000000\s+0\n/);
    assert.equal((await x.h.store.limits.get(x.a.id)).v1TokensPerMonth, 2_000_000);

    const removed = await runCli(["workspace", "limits", ws, "--v1-tokens-per-month", "none", "--json"], env);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(JSON.parse(removed.stdout).limits.v1_tokens_per_month, null);
    assert.equal((await x.h.store.limits.get(x.a.id)).v1TokensPerMonth, null);

    const bad = await runCli(["workspace", "limits", ws, "--v1-tokens-per-month", "lots"], env);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /expected a whole number or "none", got "lots"/);
  });

  test("--user-namespace off and --syscall-filter denylist opt a workspace out; on and allowlist give the defaults back", async () => {
    const ws = x.a.externalId;
    const shown = await runCli(["workspace", "limits", ws], env);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /\nuser_namespace\s+on\s*\n/);
    assert.match(shown.stdout, /\nsyscall_filter\s+allowlist\s*\n/);

    const out = await runCli(
      ["workspace", "limits", ws, "--user-namespace", "off", "--syscall-filter", "denylist"],
      env,
    );
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout, /\nuser_namespace\s+off\s*\n/);
    assert.match(out.stdout, /\nsyscall_filter\s+denylist\s*\n/);
    const stored = await x.h.store.limits.get(x.a.id);
    assert.deepEqual([stored.userNamespace, stored.syscallFilter], [false, "denylist"]);

    const one = await runCli(["workspace", "limits", ws, "--user-namespace", "on", "--json"], env);
    assert.equal(one.code, 0, one.stderr);
    const json = JSON.parse(one.stdout).limits;
    assert.deepEqual([json.user_namespace, json.syscall_filter], [true, "denylist"], "each flag on its own");
    await runCli(["workspace", "limits", ws, "--syscall-filter", "allowlist"], env);
    assert.equal((await x.h.store.limits.get(x.a.id)).syscallFilter, "allowlist");

    for (const args of [
      ["--user-namespace", "false"],
      ["--syscall-filter", "none"],
    ]) {
      const bad = await runCli(["workspace", "limits", ws, ...args], env);
      assert.notEqual(bad.code, 0, args.join(" "));
      assert.match(bad.stderr, /Allowed choices are/, args.join(" "));
    }
    const help = await runCli(["workspace", "limits", "--help"], env);
    assert.match(help.stdout, /--user-namespace <on\|off>/);
    assert.match(help.stdout, /--syscall-filter <filter>/);
  });
});
