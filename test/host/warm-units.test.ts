// Which requests a pre-warmed runner may become, and the option's bounds.
// No root, no containers (test/bridge/warm-runners.test.ts runs them).

import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveContainerHostOptions } from "../../agent/host/options.ts";
import { resolveRunRequest } from "../../agent/host/request.ts";
import { warmIneligible } from "../../agent/host/warm-runners.ts";
import { resolveAgentOptions } from "../../agent/options.ts";
import type { RunContainerRequest } from "../../api/index.ts";

const runner = { stubId: "stub-1", workspaceId: "ws-1", stubType: "function", handler: "app:f" };
const req = (o: Partial<RunContainerRequest> = {}) =>
  resolveRunRequest({
    image: "python:3.11",
    cpu: 0.25,
    memoryBytes: 128 << 20,
    runner,
    ...o,
  } as RunContainerRequest);

test("a plain function runner may take a pre-warmed runner; what a started container cannot take may not", () => {
  assert.equal(warmIneligible(req(), 0), undefined);
  assert.equal(warmIneligible(req({ env: { SECRET: "x" }, exposedPorts: [8000] }), 0), undefined);
  assert.equal(warmIneligible(req({ runner: undefined }), 0), "not a runner");
  assert.equal(warmIneligible(req({ args: ["python3", "x.py"] }), 0), "its own program");
  assert.equal(warmIneligible(req({ gpu: { count: 1 } }), 0), "GPUs");
  assert.equal(warmIneligible(req(), 1), "mounts");
  assert.equal(warmIneligible(req({ isolation: "gvisor" }), 0), "gVisor");
  // A pooled runner started with the defaults: a workspace opted out of either starts cold.
  assert.equal(warmIneligible(req({ userNamespace: false }), 0), "no user namespace");
  assert.equal(warmIneligible(req({ syscallFilter: "denylist" }), 0), "the deny-list system call filter");
  assert.equal(warmIneligible(req({ userNamespace: true, syscallFilter: "allowlist" }), 0), undefined);
  assert.equal(warmIneligible(req({ hostname: "box" }), 0), "its own user, hostname or working directory");
  assert.equal(warmIneligible(req({ startupWindowMs: 2000 }), 0), "a start-up window");
  const gang = {
    id: "g1",
    vni: 7,
    rank: 0,
    size: 1,
    hosts: ["192.0.2.1"],
    subnet: "10.251.0.0/24",
    masterPort: 29500,
  };
  assert.equal(warmIneligible(req({ gang }), 0), "a gang member");
});

test("warmRunners is an integer 0..64, on the host and on the agent", () => {
  const base = { root: "/tmp/x", images: {}, network: {}, runtime: () => ({}) } as never;
  const host = (warmRunners: number) =>
    resolveContainerHostOptions({ ...(base as object), warmRunners } as never).warmRunners;
  assert.equal(resolveContainerHostOptions(base).warmRunners, 0);
  assert.equal(host(2), 2);
  for (const bad of [-1, 65, 1.5]) assert.throws(() => host(bad), /warmRunners must be an integer 0\.\.64/);
  assert.equal(resolveAgentOptions({}).warmRunners, 0);
  assert.equal(resolveAgentOptions({ warmRunners: 3 }).warmRunners, 3);
  assert.throws(() => resolveAgentOptions({ warmRunners: 100 }), /--warm-runners must be an integer 0\.\.64/);
});

test("warmSandboxes is an integer 0..64, on the host and on the agent", () => {
  const base = { root: "/tmp/x", images: {}, network: {}, runtime: () => ({}) } as never;
  const host = (warmSandboxes: number) =>
    resolveContainerHostOptions({ ...(base as object), warmSandboxes } as never).warmSandboxes;
  assert.equal(resolveContainerHostOptions(base).warmSandboxes, 0);
  assert.equal(host(2), 2);
  for (const bad of [-1, 65, 1.5]) assert.throws(() => host(bad), /warmSandboxes must be an integer 0\.\.64/);
  assert.equal(resolveAgentOptions({}).warmSandboxes, 0);
  assert.equal(resolveAgentOptions({ warmSandboxes: 3 }).warmSandboxes, 3);
  assert.throws(
    () => resolveAgentOptions({ warmSandboxes: 100 }),
    /--warm-sandboxes must be an integer 0\.\.64/,
  );
});
