// The coordinator's image GC (coordinator/images/gc.ts) over the real store
// (SQLite and PostgreSQL) and deploymentsUsingImage: an image older than the
// GC age that no active deployment runs is dropped from every agent (by
// digest), then its record goes; a younger one, one an active deployment
// runs, one still building and one a container on some agent runs from
// (the agent refuses with conflict) all stay; an agent that never had the
// image is no obstacle. The agents are in-memory image caches that answer as
// the agent's ImageStore does (not_found, conflict).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { deploymentsUsingImage, ImageGc } from "../../coordinator/images/index.ts";
import type { BuiltImage } from "../../coordinator/images/store.ts";
import { BerthError } from "../../shared/errors.ts";
import { openSuiteStore, STORE_ENGINES } from "../helpers/engines.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

class AgentCache {
  readonly digests = new Set<string>();
  readonly inUse = new Set<string>();
  readonly removed: string[] = [];

  async removeImage(ref: string): Promise<void> {
    if (!this.digests.has(ref)) throw new BerthError("not_found", `image ${ref} not found`);
    if (this.inUse.has(ref)) throw new BerthError("conflict", `image ${ref} is in use by c-1`);
    this.digests.delete(ref);
    this.removed.push(ref);
  }
}

const DAY = 86_400_000;
const NOW = Date.parse("2026-06-01T12:00:00Z");
const ago = (ms: number) => new Date(NOW - ms).toISOString();

function image(
  workspaceId: string,
  imageId: string,
  updatedAt: string,
  status: BuiltImage["status"] = "ready",
): BuiltImage {
  const digest = `sha256:${imageId.replace(/\W/g, "").padEnd(64, "0").slice(0, 64)}`;
  return {
    workspaceId,
    imageId,
    status,
    baseImage: "",
    baseDigest: "sha256:base",
    agentId: "agent-a",
    ref: status === "ready" ? `127.0.0.1:5000/berth/${workspaceId}@${digest}` : "",
    digest: status === "ready" ? digest : "",
    steps: ["echo"],
    error: "",
    createdAt: updatedAt,
    updatedAt,
  };
}

for (const engine of STORE_ENGINES) {
  describe(`image GC (${engine.name})`, async () => {
    const store = await openSuiteStore(engine);
    const ws = (await store.workspaces.create("gc-a")).id;
    const otherWs = (await store.workspaces.create("gc-b")).id;
    const a = new AgentCache();
    const b = new AgentCache();
    const agents = new Map([
      ["agent-a", a],
      ["agent-b", b],
    ]);
    const gc = new ImageGc({
      repo: store.builtImages,
      usedBy: deploymentsUsingImage(store.deployments),
      agents: { readyIds: () => [...agents.keys()], client: (id) => agents.get(id) as AgentCache },
      afterMs: 7 * DAY,
      now: () => NOW,
    });
    const old = image(ws, "img-old", ago(8 * DAY));
    const young = image(ws, "img-young", ago(6 * DAY));
    const deployed = image(ws, "img-deployed", ago(30 * DAY));
    const running = image(otherWs, "img-running", ago(9 * DAY));
    const building = image(ws, "img-building", ago(10 * DAY), "building");
    const failed = image(otherWs, "img-failed", ago(10 * DAY), "failed");
    for (const i of [old, young, deployed, running, building, failed]) await store.builtImages.put(i);
    // The old image is on agent a only; the running one on both, a container on b runs from it.
    a.digests.add(old.digest);
    for (const c of [a, b]) c.digests.add(running.digest);
    b.inUse.add(running.digest);
    const at = new Date(NOW).toISOString();
    const stub = await store.stubs.upsert(ws, {
      name: "uses-image",
      type: "endpoint/deployment",
      config: stubConfig(),
      extra: stubExtra({ image_ref: deployed.ref }),
      objectId: null,
    });
    const reserved = await store.deployments.reserveVersion(ws, "uses-image", "endpoint", at);
    const dep = await store.deployments.attachStub(reserved.id, stub.stub.id, at);

    test("a sweep removes the old unused images and keeps the rest", async () => {
      const removed = await gc.sweep();
      assert.deepEqual(removed.sort(), ["img-failed", "img-old"]);
      assert.deepEqual(
        [...a.removed].sort(),
        [old.digest, running.digest].sort(),
        "agent a dropped the old image (and the running one)",
      );
      assert.ok(!a.digests.has(old.digest));
      const left = async (w: string) => (await store.builtImages.list(w)).map((i) => i.imageId).sort();
      assert.deepEqual(await left(ws), ["img-building", "img-deployed", "img-young"]);
      assert.deepEqual(await left(otherWs), ["img-running"], "a container on agent b still runs it");
    });

    test("once its container is gone and its deployment stopped, the next sweep takes them", async () => {
      b.inUse.clear();
      await store.deployments.setActive(dep.id, false, at);
      const removed = await gc.sweep();
      assert.deepEqual(removed.sort(), ["img-deployed", "img-running"]);
      assert.ok(!b.digests.has(running.digest));
      assert.deepEqual((await store.builtImages.list(ws)).map((i) => i.imageId).sort(), [
        "img-building",
        "img-young",
      ]);
    });

    test("forget (berth image rm) drops the copies it can, keeping one a container runs from", async () => {
      const gone = image(ws, "img-gone", ago(DAY));
      for (const c of [a, b]) c.digests.add(gone.digest);
      a.inUse.add(gone.digest);
      await gc.forget(gone);
      assert.ok(a.digests.has(gone.digest), "agent a keeps it: a container runs from it");
      assert.ok(!b.digests.has(gone.digest), "agent b dropped it");
    });
  });
}
