// The survivors end a dead coordinator's open direct tasks on a timer
// (coordinator/tasks/direct-orphans.ts; docs/reliability.md "Several
// coordinators"): after two checks in a row that nobody claimed them, once
// (two survivors checking at once write one final entry), never while their
// coordinator lives, and never from a coordinator cut off from NATS.

import assert from "node:assert/strict";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { after, test } from "node:test";
import { connect } from "nats";
import pino from "pino";
import { DirectOrphanCheck } from "../../coordinator/tasks/direct-orphans.ts";
import { DirectOwners } from "../../coordinator/tasks/direct-owners.ts";
import { TaskEngine } from "../../coordinator/tasks/engine.ts";
import { waitFor } from "../../shared/net.ts";
import { recordDirectTask, startTaskHarness, stubConfig, stubExtra, type TaskHarness } from "./harness.ts";

const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

// The timer never fires in these tests (an hour): each check is called by the test.
const CHECKS = { intervalMs: 3_600_000, graceMs: 0, answerWaitMs: 300 };

/** A coordinator serving one open direct task (RUNNING, its row written); `die()` stops it. */
async function servingCoordinator(h: TaskHarness, name: string) {
  const serving = h.newService();
  await serving.start();
  let dead = false;
  const die = async () => {
    if (dead) return;
    dead = true;
    await serving.stop();
  };
  cleanups.push(die);
  const { stub } = await serving.upsertStub(h.ws.id, {
    name,
    type: "endpoint/deployment",
    config: stubConfig(),
    extra: stubExtra(),
  });
  const { id } = recordDirectTask(serving.direct, stub);
  assert.equal(serving.direct.started(id, "ctr-1", "agent-1"), true);
  await waitFor(async () => (await h.store.tasks.get(id))?.status === "RUNNING", {
    timeoutMs: 5000,
    what: "the open request's row",
  });
  return { serving, id, die };
}

test("survivors end a dead coordinator's open direct task after two unclaimed checks, once, never a live one's", async () => {
  const h = await startTaskHarness(
    { after: (fn) => cleanups.push(fn) },
    { directFoldMs: 20, directOrphans: CHECKS },
  );
  const survivor = h.tasks;
  const other = h.newService();
  await other.start();
  cleanups.push(() => other.stop());
  const { id, die } = await servingCoordinator(h, "ep");

  // While its coordinator lives, every check leaves the request open.
  for (let i = 0; i < 3; i++)
    assert.deepEqual(
      await Promise.all([survivor.directOrphans.check(), other.directOrphans.check()]),
      [0, 0],
    );
  assert.equal((await h.store.tasks.get(id))?.status, "RUNNING");

  const result = survivor.waitResult(h.ws.id, id, 60_000);
  await die();
  // First check after the death: unclaimed once, not ended yet.
  assert.deepEqual(await Promise.all([survivor.directOrphans.check(), other.directOrphans.check()]), [0, 0]);
  assert.equal((await h.store.tasks.get(id))?.status, "RUNNING");
  // Second: both survivors try at once; one ends it.
  const ended = await Promise.all([survivor.directOrphans.check(), other.directOrphans.check()]);
  assert.equal(ended[0] + ended[1], 1, `one survivor ended it: ${ended}`);

  const row = await h.store.tasks.get(id);
  assert.equal(row?.status, "FAILED");
  assert.equal(row?.error?.type, "CoordinatorDied");
  assert.match(row?.error?.message ?? "", /coordinator serving this request died/);
  assert.ok(row?.endedAt, "the end time is written");
  const finals = (await h.store.tasks.history(id)).filter((e) => e.status === "FAILED");
  assert.equal(finals.length, 1, "one final entry in the task's history");
  assert.equal(finals[0]?.reason, "coordinator_died");
  // A watcher on a survivor hears the end; both survivors answer FAILED.
  assert.equal((await result).status, "FAILED");
  for (const s of [survivor, other]) assert.equal((await s.getTask(h.ws.id, id)).status, "FAILED");
  // Nothing left for later checks.
  assert.deepEqual(await Promise.all([survivor.directOrphans.check(), other.directOrphans.check()]), [0, 0]);
});

/** A loopback TCP relay to `port`; `cut()` drops what the client sends from then on (its connection looks up). */
async function cuttableRelay(port: number): Promise<{ port: number; cut(): void; close(): Promise<void> }> {
  let cut = false;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: "127.0.0.1", port });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => sockets.delete(s));
    }
    client.on("data", (d) => {
      if (!cut) upstream.write(d);
    });
    upstream.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: (server.address() as { port: number }).port,
    cut: () => {
      cut = true;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

test("a coordinator cut off from NATS ends nothing: it does not hear its own question", async () => {
  const h = await startTaskHarness(
    { after: (fn) => cleanups.push(fn) },
    { directFoldMs: 20, directOrphans: CHECKS },
  );
  const { id, die } = await servingCoordinator(h, "ep-cut");
  await die();

  const relay = await cuttableRelay(Number(new URL(h.nats.url).port));
  cleanups.push(() => relay.close());
  const nc = await connect({
    servers: `127.0.0.1:${relay.port}`,
    user: h.nats.coordinator.user,
    pass: h.nats.coordinator.password,
    reconnect: false,
  });
  cleanups.push(() => nc.close().catch(() => undefined));
  const log = pino({ level: "silent" });
  const engine = new TaskEngine(h.store.tasks, log, () => undefined);
  cleanups.push(() => engine.stop());
  const owners = new DirectOwners(nc, () => false, log);
  owners.start();
  cleanups.push(() => owners.stop());
  const check = new DirectOrphanCheck({
    tasks: h.store.tasks,
    engine,
    owners,
    owns: () => false,
    relay: () => undefined,
    log,
    ...CHECKS,
  });
  await nc.flush();
  relay.cut();
  // Its questions go nowhere: however many checks, the task is not ended by this coordinator.
  for (let i = 0; i < 3; i++) assert.equal(await check.check(), 0);
  assert.equal((await h.store.tasks.get(id))?.status, "RUNNING");
  // A connected survivor ends it on its second check.
  assert.equal(await h.tasks.directOrphans.check(), 0);
  assert.equal(await h.tasks.directOrphans.check(), 1);
  assert.equal((await h.store.tasks.get(id))?.status, "FAILED");
});
