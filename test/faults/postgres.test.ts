// Fault case: PostgreSQL restarts during task submission. A real PostgreSQL
// server holds the coordinator's store and a real nats-server its queues; the
// test submits tasks one after another while the database is stopped and
// started again, and an agent stand-in takes each queued task from JetStream
// and reports it done with its input as the result, as agents do. Every
// submission the caller saw accepted must reach exactly one final status with
// the right result; a submission that failed must have left no task behind
// that never ends.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { connect } from "nats";
import pino from "pino";
import { Objects } from "../../coordinator/objects/objects.ts";
import { Store } from "../../coordinator/records.ts";
import { TaskService } from "../../coordinator/tasks/service.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { freePort } from "../../shared/net.ts";
import { TASKS_STREAM, TaskHeaders, stubConsumerName, taskEventSubject } from "../../shared/tasks.ts";
import { needs, unavailable } from "../helpers/env.ts";
import { waitForPostgres } from "../helpers/postgres.ts";
import { startTestNats } from "../helpers/nats.ts";
import { teardownStack } from "../helpers/suite.ts";
import { waitUntil } from "../helpers/wait.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { assertFaultSummary, countDuplicates, tallyTasks } from "./summary.ts";

const SUBMISSIONS = 300;
/** Submitted once PostgreSQL is back. */
const AFTER_RESTART = 30;

/** The PostgreSQL server binaries (Debian's postgresql package, or on PATH). */
function postgresBin(): string | undefined {
  const root = "/usr/lib/postgresql";
  if (existsSync(root)) {
    for (const v of readdirSync(root).sort().reverse())
      if (existsSync(join(root, v, "bin", "postgres"))) return join(root, v, "bin");
  }
  try {
    const p = execFileSync("sh", ["-c", "command -v postgres"], { encoding: "utf8" }).trim();
    return p ? join(p, "..") : undefined;
  } catch {
    return undefined;
  }
}

/** A PostgreSQL server the test can stop and start again on the same data and port. */
async function restartablePostgres(bin: string, defer: (fn: () => unknown) => void) {
  const dir = mkdtempSync(join(tmpdir(), "berth-fault-pg-"));
  defer(() => rmSync(dir, { recursive: true, force: true }));
  // PostgreSQL refuses to run as root: as root it runs as the postgres system user.
  const ids =
    process.getuid?.() === 0
      ? {
          uid: Number(execFileSync("id", ["-u", "postgres"]).toString()),
          gid: Number(execFileSync("id", ["-g", "postgres"]).toString()),
        }
      : undefined;
  if (ids) chownSync(dir, ids.uid, ids.gid);
  const data = join(dir, "data");
  execFileSync(join(bin, "initdb"), ["-D", data, "-U", "berth", "--auth=trust", "-E", "UTF8", "--no-sync"], {
    ...ids,
    stdio: "pipe",
  });
  const port = await freePort();
  const url = `postgres://berth@127.0.0.1:${port}/postgres`;
  let server: ReturnType<typeof spawn> | undefined;
  let exited: Promise<void> = Promise.resolve();
  const start = async () => {
    const s = spawn(
      join(bin, "postgres"),
      ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
      { ...ids, stdio: "ignore" },
    );
    server = s;
    exited = new Promise<void>((r) => s.once("exit", () => r()));
    await waitForPostgres(url);
  };
  const stop = async () => {
    const s = server;
    if (!s || s.exitCode !== null || s.signalCode !== null) return;
    s.kill("SIGINT"); // fast shutdown: open connections are cut
    await exited;
  };
  defer(async () => {
    server?.kill("SIGKILL");
    await exited;
  });
  await start();
  return { url, start, stop };
}

test("PostgreSQL restarts during task submission: every accepted task ends once, with the right result", async (t) => {
  if (!needs(t, { root: true, commands: ["nats-server"] })) return;
  const bin = postgresBin();
  if (!bin) {
    unavailable(t, "PostgreSQL server binaries (apt-get install postgresql)");
    return;
  }
  const { defer, later } = teardownStack(t);
  const pg = await restartablePostgres(bin, defer);
  const nats = await startTestNats(later);
  const dir = mkdtempSync(join(tmpdir(), "berth-fault-pg-data-"));
  defer(() => rmSync(dir, { recursive: true, force: true }));
  const store = await Store.open(pg.url);
  defer(() => store.close());
  const nc = await connect({
    servers: nats.url,
    user: nats.coordinator.user,
    pass: nats.coordinator.password,
  });
  defer(() => closeNats(nc));
  const agentNc = await connect({ servers: nats.url, user: nats.agent.user, pass: nats.agent.password });
  defer(() => closeNats(agentNc));
  const tasks = new TaskService({
    store,
    nats: nc,
    objects: new Objects(store.objects, dir),
    counts: { activeContainers: () => 1 },
    log: pino({ level: "silent" }),
    sweepIntervalMs: 100,
  });
  await tasks.start();
  defer(() => tasks.stop());
  const ws = await store.workspaces.create("faults-pg");
  const { stub } = await store.stubs.upsert(ws.id, {
    name: "echo",
    type: "function",
    config: stubConfig({ handler: "app:echo" }),
    extra: stubExtra({}),
    objectId: null,
  });

  // The agent stand-in: takes each queued task, reports it started and COMPLETE with its input as the result.
  const js = agentNc.jetstream();
  const enc = new TextEncoder();
  let agentStopped = false;
  const ran = new Map<string, number>();
  const agent = (async () => {
    await waitUntil(() => tasks.pendingTasks(ws.id) > 0 || agentStopped, {
      what: "the first task",
      timeoutMs: 60_000,
    });
    const consumer = await js.consumers.get(TASKS_STREAM, stubConsumerName(stub.id));
    while (!agentStopped) {
      const m = await consumer.next({ expires: 1000 });
      if (!m) continue;
      const taskId = m.headers?.get(TaskHeaders.taskId) ?? "";
      const attempt = (ran.get(taskId) ?? 0) + 1;
      ran.set(taskId, attempt);
      const base = {
        stubId: stub.id,
        workspaceId: ws.id,
        agentId: "agent-pg",
        containerId: "ctr-pg",
        attempt,
        taskId,
      };
      const publish = (ev: Record<string, unknown>) =>
        js.publish(
          taskEventSubject("agent-pg", taskId),
          enc.encode(JSON.stringify({ ...base, at: Date.now(), ...ev })),
        );
      await publish({ type: "started" });
      await publish({ type: "finished", status: "COMPLETE", result: Buffer.from(m.data).toString("base64") });
      m.ack();
    }
  })();
  defer(async () => {
    agentStopped = true;
    await agent;
  });

  // Submissions, one input each; PostgreSQL goes away a third of the way in and is back at two thirds.
  const accepted = new Map<string, string>();
  const refused: string[] = [];
  const submit = async (input: string) => {
    try {
      const [id] = await tasks.submit(ws.id, stub.id, [Buffer.from(input)]);
      assert.ok(id);
      accepted.set(id, input);
    } catch (e) {
      refused.push(`${input}: ${(e as Error).message}`);
    }
  };
  let restart: Promise<void> | undefined;
  for (let i = 0; i < SUBMISSIONS; i++) {
    if (i === Math.floor(SUBMISSIONS / 3)) await pg.stop();
    if (i === Math.floor((2 * SUBMISSIONS) / 3)) restart = pg.start();
    await submit(`input-${i}`);
  }
  await restart;
  // The last third may all run while PostgreSQL is still starting (how fast it comes back is the
  // machine's): once it answers, submissions are accepted again without restarting anything.
  const beforeRestart = accepted.size;
  for (let i = 0; i < AFTER_RESTART; i++) await submit(`input-after-${i}`);
  assert.ok(refused.length > 0, "submissions while PostgreSQL was down were refused");
  assert.ok(
    beforeRestart >= Math.floor(SUBMISSIONS / 3),
    "every submission before PostgreSQL stopped was accepted",
  );
  assert.ok(accepted.size > beforeRestart, "submissions after the restart were accepted");

  // Every task the store holds for the stub, accepted or not, reaches a final status.
  const rowsOf = async () =>
    (await store.tasks.list(ws.id, { stubIds: [stub.id] }, { limit: 10_000 })) as {
      id: string;
      status: string;
      attempt: number;
    }[];
  const rows = await waitUntil(
    async () => {
      const r = await rowsOf();
      return r.every((x) => ["COMPLETE", "FAILED", "CANCELLED", "EXPIRED", "TIMEOUT"].includes(x.status)) &&
        r.length >= accepted.size
        ? r
        : undefined;
    },
    {
      what: "every task to reach a final status",
      timeoutMs: 90_000,
      describe: () => `accepted ${accepted.size}, refused ${refused.length}`,
    },
  );
  const stored = new Set(rows.map((r) => r.id));
  const missing = [...accepted.keys()].filter((id) => !stored.has(id));
  let wrong = 0;
  const finals = new Map<string, number>();
  for (const id of accepted.keys()) {
    const rec = await store.tasks.get(id);
    if (rec?.status !== "COMPLETE" || rec.result?.toString() !== accepted.get(id)) wrong++;
    const history = await tasks.history(ws.id, id);
    finals.set(
      id,
      history.filter((h) => ["COMPLETE", "FAILED", "CANCELLED", "EXPIRED", "TIMEOUT"].includes(h.status))
        .length,
    );
  }
  const counts = tallyTasks(
    [...accepted.keys()].map((id) => {
      const r = rows.find((x) => x.id === id);
      return {
        id,
        status: r?.status ?? "MISSING",
        attempts: r?.attempt ?? 0,
        finalEntries: finals.get(id) ?? 0,
      };
    }),
    { duplicateResults: countDuplicates(rows.map((r) => r.id)), wrong },
  );
  assert.deepEqual(missing, [], "no accepted task is missing from the store");
  t.diagnostic(
    `refused while PostgreSQL was down: ${refused.length}; tasks left by refused submissions: ${rows.length - accepted.size}`,
  );
  assertFaultSummary(t, "PostgreSQL restart during submission", counts);
});
