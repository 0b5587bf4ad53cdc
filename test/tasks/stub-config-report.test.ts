import assert from "node:assert/strict";
import { test } from "node:test";
import { reportedStubConfig } from "../../coordinator/tasks/status-routes.ts";
import { stubRecord } from "../containers/fakes.ts";
import { checkStubConfigAgainstSpec } from "./stub-config-spec.ts";

// What the SDK registers for `@endpoint(cpu=0.5, memory=256)`: runtime.cpu rounded up, the exact millicores in extra.
const endpoint = stubRecord("stub-ep", {
  type: "endpoint",
  config: {
    runtime: { cpu: 1, gpu: "", memory: 256, image_id: "img-default" },
    handler: "app:predict",
    task_policy: { max_retries: 0, timeout: 180, expires: "180" },
    authorized: true,
  },
  extra: { cpu_millicores: 500 },
});

test("the task status API's stub.config of a cpu=0.5 endpoint, field by field against the spec's table", () => {
  const createdAt = Date.parse("2026-11-26T10:00:00.000Z");
  const config = reportedStubConfig(endpoint, { expiresAt: createdAt + 180_000 });
  const decoded = JSON.parse(JSON.stringify(config)) as Record<string, unknown>;
  checkStubConfigAgainstSpec(decoded);
  assert.deepEqual(decoded.runtime, { cpu: 500, gpu: "", memory: 256, image_id: "img-default" });
  assert.deepEqual(decoded.task_policy, {
    max_retries: 0,
    timeout: 180,
    expires: "2026-11-26T10:03:00.000Z",
  });
  assert.equal(decoded.handler, "app:predict");
  assert.equal(decoded.authorized, true);
  assert.equal(endpoint.config.runtime.cpu, 1, "the stored config is left as registered");
  assert.equal(
    decoded.python_version,
    endpoint.config.python_version,
    "the registered one when the container is not asked",
  );
  // The container's own answer wins over what the program registered (Image() says 3.8).
  assert.equal(reportedStubConfig(endpoint, { expiresAt: null }, "3.11").python_version, "3.11");
});

test("a task that never expires reports expires as an empty string; whole cores are 1000 millicores each", () => {
  const fn = stubRecord("stub-fn", {
    config: { runtime: { cpu: 2, gpu: "A10G", memory: 128, image_id: "" } },
  });
  const config = reportedStubConfig(
    { ...fn, extra: { ...fn.extra, cpu_millicores: 0 } },
    { expiresAt: null },
  );
  checkStubConfigAgainstSpec(JSON.parse(JSON.stringify(config)));
  assert.equal(config.runtime.cpu, 2000);
  assert.equal(config.task_policy.expires, "");
});

test("the spec check fails on a field of the wrong type or a missing one", () => {
  const good = JSON.parse(JSON.stringify(reportedStubConfig(endpoint, { expiresAt: null }))) as Record<
    string,
    Record<string, unknown>
  >;
  const bad = structuredClone(good);
  (bad.task_policy as Record<string, unknown>).expires = "180";
  assert.throws(() => checkStubConfigAgainstSpec(bad), /task_policy.expires/);
  const missing = structuredClone(good);
  delete (missing as Record<string, unknown>).workers;
  assert.throws(() => checkStubConfigAgainstSpec(missing));
  const fraction = structuredClone(good);
  (fraction.runtime as Record<string, unknown>).cpu = 0.5;
  assert.throws(() => checkStubConfigAgainstSpec(fraction), /runtime.cpu/);
});
