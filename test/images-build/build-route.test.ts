// The build route's NDJSON stream: an error after the stream started goes through the one error
// edge — a catalog error keeps its code and message, anything else is masked with an error id.

import assert from "node:assert/strict";
import { test } from "node:test";
import Fastify, { type FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { ImageBuilds, ImageBuildUpdate } from "../../coordinator/images/index.ts";
import { HandPulls } from "../../coordinator/images/index.ts";
import { imageRoutes } from "../../coordinator/images/routes.ts";

function appWith(fail: () => never) {
  const builds = {
    build: async function* (): AsyncGenerator<ImageBuildUpdate> {
      yield { type: "step", index: 1, total: 2, step: "echo hi" } as unknown as ImageBuildUpdate;
      fail();
    },
  } as unknown as ImageBuilds;
  const app = Fastify({ logger: false });
  app.decorateRequest("principal", null);
  app.addHook("onRequest", async (req: FastifyRequest) => {
    (req as unknown as { principal: unknown }).principal = {
      workspace: { id: "w1", externalId: "ws-1" },
      token: { admin: false },
    };
  });
  const pulls = new HandPulls({
    repo: { get: async () => undefined },
    ready: () => [],
    pullOn: () => Promise.reject(new Error("no agent")),
  });
  app.register(imageRoutes(builds, pulls));
  return app;
}

async function lastLine(app: ReturnType<typeof appWith>) {
  const r = await app.inject({
    method: "POST",
    url: "/api/v1/image/ws-1/build",
    payload: { image: { python_version: "python3" } },
  });
  assert.equal(r.statusCode, 200);
  const lines = r.body
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  assert.ok(lines.length >= 2, r.body);
  return lines[lines.length - 1];
}

test("an unexpected error mid-stream is masked: no internal text reaches the client", async (t) => {
  const app = appWith(() => {
    throw new Error("ENOENT: /var/lib/berth-agent/images/secret-path");
  });
  t.after(() => app.close());
  const last = await lastLine(app);
  assert.equal(last.event, "error");
  assert.equal(last.error.code, "internal");
  assert.doesNotMatch(JSON.stringify(last), /secret-path|ENOENT|var\/lib/);
  assert.match(last.error.message, /[0-9a-f-]{6,}/, "the masked message carries an error id");
});

test("a catalog error mid-stream keeps its code and message", async (t) => {
  const app = appWith(() => {
    throw new BerthError("failed_precondition", "step 2 exited with 1");
  });
  t.after(() => app.close());
  const last = await lastLine(app);
  assert.equal(last.event, "error");
  assert.equal(last.error.code, "failed_precondition");
  assert.equal(last.error.message, "step 2 exited with 1");
});
