// The composition root's lifecycle (coordinator/main.ts, lifecycle.ts): a
// real coordinator (nats-server, SQLite) is made to fail at each start-up
// step in turn, and every time nothing it started is left behind: every
// timer, socket, server, pipe and child process the start created has ended
// (the NATS connection, and with it every subscription, is closed), and the
// port is free. A clean start and stop leaves nothing either.

import assert from "node:assert/strict";
import { createHook } from "node:async_hooks";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import { StartupError, startCoordinator } from "../../coordinator/main.ts";
import { resolveCoordinatorOptions } from "../../coordinator/options.ts";
import { freePort } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";
import { startTestNats, type TestNats } from "../helpers/nats.ts";

// Resources a start creates and a stop must end: timers (ref'd or not), sockets,
// servers, pipes and child processes. Tracked by async_hooks from creation to
// destruction, so an unref'd interval that would tick forever counts too.
const TRACKED = new Set([
  "Timeout",
  "TCPWRAP",
  "TCPSERVERWRAP",
  "PIPEWRAP",
  "PROCESSWRAP",
  "FSEVENTWRAP",
  "SIGNALWRAP",
]);

/** Runs `fn` and returns it with the resources it created that are still alive. */
function tracking() {
  const live = new Map<number, string>();
  const hook = createHook({
    init(id, type) {
      if (TRACKED.has(type)) live.set(id, type);
    },
    destroy(id) {
      live.delete(id);
    },
  });
  hook.enable();
  return {
    /** Resources still alive, by kind; waits up to 5 s for closes in flight. Stops tracking. */
    async leftOver(): Promise<Record<string, number>> {
      let counts: Record<string, number> = {};
      for (let i = 0; i < 50; i++) {
        // A destroyed handle's hook runs after its close callback: let the loop turn.
        await new Promise((r) => setTimeout(r, 100));
        counts = {};
        for (const type of live.values()) counts[type] = (counts[type] ?? 0) + 1;
        // The waits of this loop are themselves timers: they are not the coordinator's.
        counts.Timeout = (counts.Timeout ?? 0) - 1;
        if (counts.Timeout <= 0) delete counts.Timeout;
        if (Object.keys(counts).length === 0) break;
      }
      hook.disable();
      return counts;
    },
  };
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

describe("coordinator start-up: a failure at any step stops what was started", () => {
  let nats: TestNats;
  let dir: string;
  let steps: string[] = [];
  const cleanups: (() => unknown)[] = [];
  const t = { after: (fn: () => unknown) => void cleanups.push(fn) };
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  let run = 0;

  const options = async () => {
    run++;
    return resolveCoordinatorOptions({
      host: "127.0.0.1",
      port: await freePort(),
      dataDir: join(dir, `coordinator-${run}`),
      nats: { url: nats.url, user: "coordinator", password: nats.coordinator.password },
      agentNats: { url: nats.url, user: "agent", password: nats.agent.password },
    });
  };

  before(async () => {
    nats = await startTestNats(t);
    dir = tempDir(t);
    // One start and stop first: modules load and lazy singletons of libraries settle before the baseline.
    const warm = await startCoordinator(await options(), pino({ level: "silent" }));
    await warm.stop();
  });

  test("a clean start walks every step, and stop leaves nothing running", async () => {
    const o = await options();
    const seen: string[] = [];
    const created = tracking();
    const c = await startCoordinator(o, pino({ level: "silent" }), { beforeStep: (s) => void seen.push(s) });
    steps = seen;
    assert.ok(steps.length >= 20, `only ${steps.length} steps: ${steps.join(", ")}`);
    assert.equal(steps[0], "foundations");
    assert.equal(steps.at(-1), "listen");
    assert.equal(new Set(steps).size, steps.length, "step names are unique");
    assert.equal(await portIsFree(c.port), false, "the coordinator listens");
    await c.stop();
    await c.stop(); // a second stop waits for the first and does nothing more
    assert.deepEqual(await created.leftOver(), {});
    assert.equal(await portIsFree(c.port), true);
  });

  test("each step in turn fails: a StartupError, and nothing is left", async () => {
    assert.ok(steps.length > 0, "the clean start ran first");
    for (const failing of steps) {
      const o = await options();
      const created = tracking();
      const err = await startCoordinator(o, pino({ level: "silent" }), {
        beforeStep: (s) => {
          if (s === failing) throw new Error(`planted failure at ${s}`);
        },
      }).then(
        (c) => {
          void c.stop();
          return undefined;
        },
        (e: unknown) => e,
      );
      assert.ok(err instanceof StartupError, `step ${failing}: ${String(err)}`);
      assert.match(err.message, new RegExp(`planted failure at ${failing}`), `step ${failing}`);
      assert.match(err.message, /^cannot /, `step ${failing}: says what it could not do`);
      assert.deepEqual(await created.leftOver(), {}, `left running after a failure at ${failing}`);
      assert.equal(await portIsFree(o.port), true, `port still held after a failure at ${failing}`);
    }
  });

  test("a failure inside a step (the store cannot be opened) is the step's own message", async () => {
    const o = { ...(await options()), store: "postgres://nobody@127.0.0.1:1/none" };
    const created = tracking();
    await assert.rejects(startCoordinator(o, pino({ level: "silent" })), (e: unknown) => {
      assert.ok(e instanceof StartupError);
      assert.match(e.message, /^cannot open the store/);
      return true;
    });
    assert.deepEqual(await created.leftOver(), {});
  });
});
