// docs/reference/ is what berth serves: the CLI page is every command's own
// help, the REST page every route of the whole coordinator app's OpenAPI
// document (the route fuzzer's fixture: SQLite, nats-server, every area).
// With BERTH_WRITE_REFERENCE=1 (`npm run docs:reference`) the test writes
// the pages instead of comparing them.

import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { after, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { buildProgram } from "../../cli/main.ts";
import { startFuzzFixture } from "../fuzz/fixture.ts";
import { needs } from "../helpers/env.ts";
import { cliReference, restReference } from "./reference.ts";

const page = (name: string) => fileURLToPath(new URL(`../../docs/reference/${name}`, import.meta.url));

function checkOrWrite(path: string, made: string): void {
  if (process.env.BERTH_WRITE_REFERENCE === "1") {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, made);
    return;
  }
  const committed = readFileSync(path, "utf8");
  if (committed === made) return;
  const a = committed.split("\n");
  const b = made.split("\n");
  const at = a.findIndex((l, i) => l !== b[i]);
  assert.fail(
    `${path} differs from what berth serves at line ${at + 1}:\n  page: ${a[at]}\n  berth: ${b[at]}\n` +
      "run `npm run docs:reference` and commit the pages",
  );
}

describe("the reference pages are what berth serves", () => {
  test("docs/reference/cli.md is every command's help", () => {
    const made = cliReference(buildProgram());
    assert.match(made, /^## berth env$/m);
    assert.match(made, /^## berth agent join$/m);
    checkOrWrite(page("cli.md"), made);
  });

  test("docs/reference/rest.md is every route of the OpenAPI document", async (t) => {
    if (!needs(t, { commands: ["nats-server"] })) return;
    const cleanups: (() => unknown)[] = [];
    after(async () => {
      for (const fn of cleanups.reverse()) await fn();
    });
    const fz = await startFuzzFixture({ after: (fn) => cleanups.push(fn) });
    const r = await fz.f.x.app.inject({ method: "GET", url: "/api/v1/openapi.json" });
    assert.equal(r.statusCode, 200);
    const made = restReference(r.json());
    assert.match(made, /\| GET \| `\/v2\/task\/\{taskId\}\/` \|/);
    checkOrWrite(page("rest.md"), made);
  });
});
