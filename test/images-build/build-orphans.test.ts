// The survivors mark failed an image build whose coordinator died
// (coordinator/images/build-orphans.ts; docs/reliability.md "Several
// coordinators"): after two checks in a row that no coordinator claims it,
// once when two check at the same time, never while a coordinator runs it,
// never a newer build of the same image, and never from a coordinator whose
// own question did not come back.

import assert from "node:assert/strict";
import { after, test } from "node:test";
import pino from "pino";
import { BUILD_COORDINATOR_DIED, BuildOrphanCheck } from "../../coordinator/images/build-orphans.ts";
import type { BuiltImage } from "../../coordinator/images/store.ts";
import { startNatsStore } from "../helpers/nats-store.ts";

const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

const CHECKS = { intervalMs: 3_600_000, graceMs: 0, answerWaitMs: 300 };

const record = (workspaceId: string, imageId: string, updatedAt: string): BuiltImage => ({
  workspaceId,
  imageId,
  status: "building",
  baseImage: "python:3.12",
  baseDigest: "sha256:base",
  agentId: "agent-1",
  ref: "",
  digest: "",
  steps: ["sleep 25"],
  error: "",
  createdAt: updatedAt,
  updatedAt,
});

test("a dead coordinator's build is marked failed after two unclaimed checks, once; a live one's never", async () => {
  const { nc, store, connectCoordinator } = await startNatsStore({ after: (fn) => cleanups.push(fn) });
  const ws = (await store.workspaces.create("builds")).id;
  const log = pino({ level: "silent" });
  const events: BuiltImage[] = [];
  // Coordinator A runs img-live; img-dead's coordinator is gone.
  const runningOnA = new Set([`${ws}/img-live`]);
  const checkers = [
    new BuildOrphanCheck({
      nats: nc,
      repo: store.builtImages,
      holds: (k) => runningOnA.has(k),
      log,
      ...CHECKS,
    }),
    new BuildOrphanCheck({
      nats: await connectCoordinator(),
      repo: store.builtImages,
      holds: () => false,
      onStatus: (i) => events.push(i),
      log,
      ...CHECKS,
    }),
  ];
  for (const c of checkers) {
    c.start();
    cleanups.push(() => c.stop());
  }
  const t0 = new Date(Date.now() - 60_000).toISOString();
  await store.builtImages.put(record(ws, "img-live", t0));
  await store.builtImages.put(record(ws, "img-dead", t0));
  const status = async (id: string) => (await store.builtImages.get(ws, id))?.status;
  const checkAll = async () => (await Promise.all(checkers.map((c) => c.check()))).reduce((a, b) => a + b, 0);

  assert.equal(await checkAll(), 0, "first sighting: nothing marked yet");
  assert.equal(await status("img-dead"), "building");
  assert.equal(await checkAll(), 1, "second: marked once, by one of the two");
  const dead = await store.builtImages.get(ws, "img-dead");
  assert.equal(dead?.status, "failed");
  assert.equal(dead?.error, BUILD_COORDINATOR_DIED);
  assert.equal(await status("img-live"), "building", "a build a live coordinator runs is left alone");
  for (let i = 0; i < 2; i++) assert.equal(await checkAll(), 0);
  assert.equal(await status("img-live"), "building");

  // A newer build of the same image between two checks is not the one that was suspected.
  runningOnA.delete(`${ws}/img-live`);
  assert.equal(await checkAll(), 0, "img-live unclaimed once");
  await store.builtImages.put(record(ws, "img-live", new Date(Date.now() - 30_000).toISOString()));
  assert.equal(await checkAll(), 0, "the newer build's row is a first sighting");
  assert.equal(await status("img-live"), "building");
  assert.equal(await checkAll(), 1);
  assert.equal(await status("img-live"), "failed");
  assert.ok(events.length <= 2 && events.every((e) => e.status === "failed"), JSON.stringify(events));
});

test("a coordinator that did not hear its own question marks nothing", async () => {
  const { store, connectCoordinator } = await startNatsStore({ after: (fn) => cleanups.push(fn) });
  const ws = (await store.workspaces.create("builds")).id;
  const log = pino({ level: "silent" });
  const cutOff = await connectCoordinator();
  // Its answerer never started: its own question does not come back to it, as over a cut connection.
  const check = new BuildOrphanCheck({
    nats: cutOff,
    repo: store.builtImages,
    holds: () => false,
    log,
    ...CHECKS,
  });
  await store.builtImages.put(record(ws, "img-1", new Date(Date.now() - 60_000).toISOString()));
  for (let i = 0; i < 3; i++) assert.equal(await check.check(), 0);
  assert.equal((await store.builtImages.get(ws, "img-1"))?.status, "building");
  check.start();
  cleanups.push(() => check.stop());
  assert.equal(await check.check(), 0);
  assert.equal(await check.check(), 1);
});
