// `berth env`: the URL and token in effect as shell assignments that `eval`
// takes back exactly (quotes included), and a clear refusal without a token.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { runCli } from "../helpers/cluster.ts";

test("berth env prints the profile's URL and token for eval, quoted", async (t) => {
  const home = mkdtempSync(join(tmpdir(), "berth-env-"));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  const env = { HOME: home, SERVICE_TOKEN: "", BERTH_URL: "", BERTH_PROFILE: "", BERTH_CONFIG: "" };
  const token = "bt_it's $(touch /nonexistent) `x`";
  const saved = await runCli(
    ["configure", "default", "--token", token, "--url", "http://10.0.0.5:8420/"],
    env,
  );
  assert.equal(saved.code, 0, saved.stderr);

  const printed = await runCli(["env"], env);
  assert.equal(printed.code, 0, printed.stderr);
  const back = execFileSync(
    "bash",
    ["-c", `eval "$1"; printf '%s\\n%s' "$BERTH_URL" "$SERVICE_TOKEN"`, "_", printed.stdout],
    {
      encoding: "utf8",
      env: { PATH: process.env.PATH },
    },
  );
  assert.deepEqual(back.split("\n"), ["http://10.0.0.5:8420", token]);

  // SERVICE_TOKEN and BERTH_URL given win over the profile, as everywhere.
  const over = await runCli(["env"], { ...env, SERVICE_TOKEN: "bt_other", BERTH_URL: "http://h:1" });
  assert.equal(over.stdout, "export BERTH_URL='http://h:1'\nexport SERVICE_TOKEN='bt_other'\n");
});

test("berth env without a token says how to get one", async (t) => {
  const home = mkdtempSync(join(tmpdir(), "berth-env-"));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  const r = await runCli(["env"], {
    HOME: home,
    SERVICE_TOKEN: "",
    BERTH_URL: "",
    BERTH_PROFILE: "",
    BERTH_CONFIG: "",
  });
  assert.equal(r.code, 1);
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /profile default has no token: run `berth up`, or `berth configure default/);
  assert.doesNotMatch(r.stderr, /\n\s+at /, "no stack trace");
});
