// A function or deployment whose image is a sandbox's filesystem snapshot
// (Image.from_id, docs/images.md): the manager starts its containers only on
// the agent holding the snapshot, from the agent's reference; an id the
// workspace does not have fails the stub's waiting tasks naming it, and no
// container starts. Another workspace's snapshot is not found either.

import assert from "node:assert/strict";
import { test } from "node:test";
import { withSnapshotImages } from "../../coordinator/containers/index.ts";
import type { StubRecord } from "../../coordinator/containers/types.ts";
import { capacity, stubRecord, world } from "./fakes.ts";

const SNAPSHOT = { id: "img-0123456789abcdef", workspaceId: "ws-1", agentId: "agent-b" };
const SNAPSHOT_REF = "localhost/berth-snapshots/img-0123456789abcdef:latest";

function snapshotWorld() {
  const stubs = new Map<string, StubRecord>();
  const asked: [string, string][] = [];
  const w = world({
    stubs: withSnapshotImages(
      { get: async (id) => stubs.get(id) },
      {
        findImage: async (ws, id) => {
          asked.push([ws, id]);
          return ws === SNAPSHOT.workspaceId && id === SNAPSHOT.id
            ? { agentId: SNAPSHOT.agentId, imageRef: SNAPSHOT_REF }
            : undefined;
        },
      },
    ),
  });
  return { w, stubs, asked };
}

test("a stub of a snapshot image starts on the agent holding it, from its reference", async () => {
  const { w, stubs, asked } = snapshotWorld();
  // agent-a has far more room and would be chosen for anything else.
  const a = w.addAgent("agent-a", capacity(64, 256));
  const b = w.addAgent("agent-b", capacity(4, 16));
  stubs.set("stub-1", stubRecord("stub-1", { extra: { image_ref: SNAPSHOT.id } }));
  stubs.set("stub-plain", stubRecord("stub-plain", { extra: { image_ref: "registry/img:1" } }));
  w.activity.set("stub-1", 2);
  w.activity.set("stub-plain", 1);
  await w.tick();
  assert.equal(a.runs.filter((r) => r.image === SNAPSHOT_REF).length, 0, "never on another agent");
  assert.equal(b.runs.filter((r) => r.image === SNAPSHOT_REF).length, 2);
  assert.equal(
    [...a.runs, ...b.runs].filter((r) => r.image === "registry/img:1").length,
    1,
    "the other stub starts as before",
  );
  assert.deepEqual(asked, [["ws-1", SNAPSHOT.id]], "only img- references are looked up");
  assert.equal(w.activity.failed.length, 0);
});

test("an unknown snapshot id (or another workspace's) fails the waiting tasks naming it; nothing starts", async () => {
  const { w, stubs } = snapshotWorld();
  const a = w.addAgent("agent-a", capacity(16, 64));
  const b = w.addAgent("agent-b", capacity(16, 64));
  stubs.set("stub-gone", stubRecord("stub-gone", { extra: { image_ref: "img-ffffffffffffffff" } }));
  stubs.set(
    "stub-other-ws",
    stubRecord("stub-other-ws", { workspaceId: "ws-2", extra: { image_ref: SNAPSHOT.id } }),
  );
  w.activity.set("stub-gone", 2);
  w.activity.set("stub-other-ws", 1, 0, "ws-2");
  await w.tick();
  assert.equal(a.runs.length + b.runs.length, 0);
  assert.deepEqual(w.activity.failed.map((f) => [f.stubId, f.code]).sort(), [
    ["stub-gone", "not_found"],
    ["stub-other-ws", "not_found"],
  ]);
  assert.match(
    w.activity.failed.find((f) => f.stubId === "stub-gone")?.message ?? "",
    /image img-ffffffffffffffff not found in this workspace \(Image\.from_id names a sandbox's filesystem snapshot/,
  );
});
