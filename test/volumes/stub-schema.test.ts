// A stub config's `volumes` through the gateway's schema as the coordinator
// compiles it (coerceTypes "array"): one volume, several, none (null), and
// what checkStubVolumes then refuses.

import assert from "node:assert/strict";
import { test } from "node:test";
import { StubConfigSchema } from "../../coordinator/functions/stub-routes.ts";
import { checkStubVolumes } from "../../shared/volumes.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { stubConfig } from "../tasks/fixtures.ts";

/** The config as a route with the schema receives it (the coordinator's Ajv options), or the 400's message. */
async function throughSchema(config: unknown): Promise<{ status: number; body: { volumes?: unknown } }> {
  const app = routesApp();
  app.post("/echo", { schema: { body: StubConfigSchema } }, async (req) => req.body);
  const r = await app.inject({ method: "POST", url: "/echo", payload: config as object });
  await app.close();
  return { status: r.statusCode, body: r.json() };
}

test("a list of one volume passes the schema unchanged (no one-element unwrapping)", async () => {
  for (const volumes of [
    [{ name: "w", mount_path: "./w" }],
    [
      { name: "a", mount_path: "./a" },
      { name: "b", mount_path: "/b" },
    ],
    null,
  ]) {
    const r = await throughSchema({ ...stubConfig(), volumes });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.volumes, volumes);
  }
  assert.equal((await throughSchema({ ...stubConfig(), volumes: { name: "w" } })).status, 400);
});

test("entries the schema lets through are judged by checkStubVolumes", () => {
  assert.throws(() => checkStubVolumes(["w"]), /volumes\[0\] must be \{name, mount_path\}/);
  assert.throws(
    () => checkStubVolumes([{ name: "a/b", mount_path: "x" }]),
    /volume volumes\[0\]\.name "a\/b" is not valid/,
  );
});
