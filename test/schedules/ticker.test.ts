import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import { ScheduleTickRepo } from "../../coordinator/schedules/claims.ts";
import { createScheduleTicker } from "../../coordinator/schedules/index.ts";
import type { ActiveSchedule, ScheduleTicker, SubmitTick } from "../../coordinator/schedules/ticker.ts";
import { Store } from "../../coordinator/records.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";
import { FakeTime } from "./fake-time.ts";

const MIN = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

// Each ticker gets its own connection to the one database, as separate
// coordinator processes would.

interface Submitted {
  stubId: string;
  tickAt: string;
  by: string;
  taskId: string;
}

function capturingLog() {
  const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
  const log = pino({ level: "debug" }, { write: (l: string) => void lines.push(JSON.parse(l)) });
  return { log, lines };
}

for (const engine of STORE_ENGINES) {
  describe(`schedule ticker on ${engine.name}`, () => {
    let url: string;
    const stores: Store[] = [];
    let workspaceId: string;
    const cleanups: (() => unknown)[] = [];
    const suite = { after: (fn: () => unknown) => cleanups.push(fn) };

    before(async () => {
      url = await engine.url(suite);
      for (let i = 0; i < 3; i++) stores.push(await Store.open(url));
      workspaceId = (await (stores[0] as Store).workspaces.create("sched")).id;
    });
    after(async () => {
      for (const s of stores) await s.close();
      for (const fn of cleanups.reverse()) await fn();
    });

    let stubCount = 0;
    async function newStub(): Promise<string> {
      const { stub } = await (stores[0] as Store).stubs.upsert(workspaceId, {
        name: `job-${++stubCount}`,
        type: "schedule",
        config: stubConfig(),
        extra: stubExtra(),
        objectId: null,
      });
      return stub.id;
    }

    /** Tickers, one per store, over one fake clock; submits go to `submitted`. */
    function tickers(
      time: FakeTime,
      schedules: ActiveSchedule[],
      submitted: Submitted[],
      o: { count?: number; pollIntervalMs?: number[]; submit?: SubmitTick } = {},
    ) {
      const { log, lines } = capturingLog();
      const list: ScheduleTicker[] = [];
      for (let i = 0; i < (o.count ?? 3); i++) {
        const by = `coord-${time.timers.length}`;
        list.push(
          createScheduleTicker({
            db: (stores[i] as Store).db,
            coordinatorId: by,
            source: { activeSchedules: async () => schedules },
            submit:
              o.submit ??
              (async (stubId, _ws, tickAt) => {
                await new Promise((r) => setImmediate(r));
                const taskId = `task-${submitted.length}-${by}`;
                submitted.push({ stubId, tickAt: tickAt.toISOString(), by, taskId });
                return taskId;
              }),
            log,
            clock: time.clock,
            timers: time.newTimers(),
            pollIntervalMs: o.pollIntervalMs?.[i] ?? 1000,
          }),
        );
      }
      for (const t of list) t.start();
      return { list, lines, stop: () => Promise.all(list.map((t) => t.stop())) };
    }

    const ticksOf = (submitted: Submitted[], stubId: string) =>
      submitted.filter((s) => s.stubId === stubId).map((s) => s.tickAt);

    test("three tickers over one database submit every tick exactly once", async () => {
      // Across the end of a leap February: 2024-02-29 23:00 to 2024-03-01 01:10.
      const t0 = Date.parse("2024-02-29T23:00:00.000Z");
      const end = t0 + 130 * MIN;
      const time = new FakeTime(t0);
      const ids = await Promise.all(Array.from({ length: 6 }, () => newStub()));
      const [everyMinute, every5, hourly, twiceHourly, lateStart, broken] = ids as [
        string,
        string,
        string,
        string,
        string,
        string,
      ];
      const since = new Date(t0 - 30_000);
      const lateSince = t0 + 42 * MIN + 30_000;
      const schedules: ActiveSchedule[] = [
        { stubId: everyMinute, workspaceId, when: "* * * * *", since },
        { stubId: every5, workspaceId, when: "*/5 * * * *", since },
        { stubId: hourly, workspaceId, when: "@hourly", since },
        { stubId: twiceHourly, workspaceId, when: "7,23 * * * *", since },
        { stubId: lateStart, workspaceId, when: "*/10 * * * *", since: new Date(lateSince) },
        { stubId: broken, workspaceId, when: "61 * * * *", since },
      ];
      const submitted: Submitted[] = [];
      const run = tickers(time, schedules, submitted, { pollIntervalMs: [1000, 1000, 1700] });
      try {
        await time.advanceTo(end);
      } finally {
        await run.stop();
      }

      // Expected ticks, by minute arithmetic from t0 (on the hour).
      const minutes = (pred: (m: number) => boolean, from = t0) => {
        const out: string[] = [];
        for (let t = t0; t <= end; t += MIN) if (t >= from && pred((t - t0) / MIN)) out.push(iso(t));
        return out;
      };
      assert.deepEqual(
        ticksOf(submitted, everyMinute).sort(),
        minutes(() => true),
      );
      assert.equal(ticksOf(submitted, everyMinute).length, 131);
      assert.deepEqual(
        ticksOf(submitted, every5).sort(),
        minutes((m) => m % 5 === 0),
      );
      assert.deepEqual(ticksOf(submitted, hourly).sort(), [
        "2024-02-29T23:00:00.000Z",
        "2024-03-01T00:00:00.000Z",
        "2024-03-01T01:00:00.000Z",
      ]);
      assert.deepEqual(
        ticksOf(submitted, twiceHourly).sort(),
        minutes((m) => m % 60 === 7 || m % 60 === 23),
      );
      assert.deepEqual(
        ticksOf(submitted, lateStart).sort(),
        minutes((m) => m % 10 === 0, lateSince),
      );
      assert.equal(ticksOf(submitted, lateStart)[0], "2024-02-29T23:50:00.000Z");
      assert.deepEqual(ticksOf(submitted, broken), []);

      // The store holds one row per tick, naming the submitter and its task.
      const repo = new ScheduleTickRepo((stores[1] as Store).db);
      for (const stubId of ids) {
        const rows = await repo.list(stubId);
        const mine = submitted
          .filter((s) => s.stubId === stubId)
          .sort((a, b) => (a.tickAt < b.tickAt ? -1 : 1));
        assert.deepEqual(
          rows,
          mine.map((s) => ({ tickAt: s.tickAt, coordinatorId: s.by, taskId: s.taskId })),
        );
      }

      // The broken schedule is reported once per ticker, with the parser's reason.
      const errors = run.lines.filter((l) => l.msg.includes("does not parse"));
      assert.equal(errors.length, 3);
      assert.match(String(errors[0]?.err), /minute field "61": 61 is out of range 0-59/);
      assert.equal(errors[0]?.stubId, broken);
    });

    test("after all coordinators were down only the latest missed tick fires, once", async () => {
      const t0 = Date.parse("2024-06-10T10:00:00.000Z");
      const time = new FakeTime(t0);
      const ids = await Promise.all(Array.from({ length: 6 }, () => newStub()));
      const [everyMinute, every5, hourly, daily, deployedWhileDown, deployedAfterTick] = ids as [
        string,
        string,
        string,
        string,
        string,
        string,
      ];
      const since = new Date(t0 - 1000);
      const schedules: ActiveSchedule[] = [
        { stubId: everyMinute, workspaceId, when: "* * * * *", since },
        { stubId: every5, workspaceId, when: "*/5 * * * *", since },
        { stubId: hourly, workspaceId, when: "0 * * * *", since },
        // Midnight was before it was deployed: nothing to catch up.
        { stubId: daily, workspaceId, when: "@daily", since },
      ];
      const submitted: Submitted[] = [];
      const first = tickers(time, schedules, submitted, { count: 2 });
      await time.advanceTo(t0 + 30 * MIN);
      await first.stop();
      assert.equal(ticksOf(submitted, everyMinute).length, 31);
      assert.deepEqual(ticksOf(submitted, daily), []);

      // Everyone down from 10:30 to 13:37:20; meanwhile two more schedules were deployed.
      schedules.push(
        {
          stubId: deployedWhileDown,
          workspaceId,
          when: "0 * * * *",
          since: new Date("2024-06-10T12:10:00Z"),
        },
        {
          stubId: deployedAfterTick,
          workspaceId,
          when: "0 * * * *",
          since: new Date("2024-06-10T13:30:00Z"),
        },
      );
      time.nowMs = Date.parse("2024-06-10T13:37:20.000Z");
      const before = submitted.length;
      const second = tickers(time, schedules, submitted, { count: 3 });
      try {
        await time.advanceTo(time.nowMs);
        const caughtUp = submitted.slice(before).map((s) => `${ids.indexOf(s.stubId)} ${s.tickAt}`);
        assert.deepEqual(caughtUp.sort(), [
          "0 2024-06-10T13:37:00.000Z",
          "1 2024-06-10T13:35:00.000Z",
          "2 2024-06-10T13:00:00.000Z",
          "4 2024-06-10T13:00:00.000Z",
        ]);
        // Then on as usual.
        await time.advanceTo(Date.parse("2024-06-10T14:00:30.000Z"));
        assert.equal(ticksOf(submitted, everyMinute).length, 31 + 1 + 23);
        assert.deepEqual(ticksOf(submitted, deployedAfterTick), ["2024-06-10T14:00:00.000Z"]);
        assert.deepEqual(ticksOf(submitted, hourly).slice(-2), [
          "2024-06-10T13:00:00.000Z",
          "2024-06-10T14:00:00.000Z",
        ]);
        assert.deepEqual(ticksOf(submitted, daily), []);
      } finally {
        await second.stop();
      }

      // A coordinator starting later does not fire the ticks already fired again.
      const count = submitted.length;
      const late = tickers(time, schedules, submitted, { count: 1 });
      try {
        await time.advanceTo(time.nowMs + 20_000);
        assert.equal(submitted.length, count);
      } finally {
        await late.stop();
      }
      const all = submitted.map((s) => `${s.stubId} ${s.tickAt}`);
      assert.equal(new Set(all).size, all.length, "no tick submitted twice");
    });

    test("a failed submit is retried on the next poll by the coordinator that claimed the tick", async () => {
      const t0 = Date.parse("2024-07-01T08:00:30.000Z");
      const time = new FakeTime(t0);
      const stubId = await newStub();
      const schedules = [{ stubId, workspaceId, when: "* * * * *", since: new Date(t0) }];
      const submitted: Submitted[] = [];
      let failures = 2;
      const run = tickers(time, schedules, submitted, {
        submit: async (id, _ws, tickAt) => {
          if (failures-- > 0) throw new Error("task service unavailable");
          submitted.push({ stubId: id, tickAt: tickAt.toISOString(), by: "?", taskId: "task-x" });
          return "task-x";
        },
      });
      try {
        await time.advanceTo(Date.parse("2024-07-01T08:01:05.000Z"));
      } finally {
        await run.stop();
      }
      assert.deepEqual(ticksOf(submitted, stubId), ["2024-07-01T08:01:00.000Z"]);
      assert.equal(run.lines.filter((l) => l.msg.includes("cannot submit a claimed tick")).length, 2);
      const rows = await new ScheduleTickRepo((stores[0] as Store).db).list(stubId);
      assert.deepEqual(
        rows.map((r) => [r.tickAt, r.taskId]),
        [["2024-07-01T08:01:00.000Z", "task-x"]],
      );
    });

    test("stop() waits for the poll in progress and leaves no timer behind", async () => {
      const t0 = Date.parse("2024-07-02T08:00:59.000Z");
      const time = new FakeTime(t0);
      const stubId = await newStub();
      const schedules = [{ stubId, workspaceId, when: "* * * * *", since: new Date(t0) }];
      let release!: () => void;
      const gate = new Promise<void>((r) => {
        release = r;
      });
      let entered!: () => void;
      const inSubmit = new Promise<void>((r) => {
        entered = r;
      });
      const done: string[] = [];
      const run = tickers(time, schedules, [], {
        count: 1,
        submit: async (_id, _ws, tickAt) => {
          entered();
          await gate;
          done.push(tickAt.toISOString());
          return "task-gated";
        },
      });
      const timers = time.timers.at(-1);
      await time.advanceTo(t0); // first poll: nothing due yet
      time.nowMs = t0 + 1000;
      assert.ok(timers?.pending, "a timer is armed while running");
      // The 08:01 poll, which blocks in submit. Not awaited: a stopped ticker never re-arms.
      void timers.fire();
      await inSubmit;
      let stopped = false;
      const stopping = run.stop().then(() => {
        stopped = true;
      });
      await new Promise((r) => setImmediate(r));
      assert.equal(stopped, false, "stop() must wait for the submit in progress");
      release();
      await stopping;
      assert.deepEqual(done, ["2024-07-02T08:01:00.000Z"]);
      assert.equal(timers?.pending, undefined, "no timer armed after stop()");
      // Stopping twice is harmless, and a stopped ticker fires nothing more.
      await run.stop();
      time.nowMs += 10 * MIN;
      assert.deepEqual(done, ["2024-07-02T08:01:00.000Z"]);
    });

    test("prune keeps each schedule's newest tick", async () => {
      const repo = new ScheduleTickRepo((stores[2] as Store).db);
      const a = await newStub();
      const b = await newStub();
      const at = (s: string) => new Date(`2024-01-0${s}T00:00:00.000Z`);
      for (const d of ["1", "2", "3"]) assert.equal(await repo.claim(a, at(d), "c1"), true);
      assert.equal(await repo.claim(a, at("3"), "c2"), false, "a tick is claimed once");
      assert.equal(await repo.claim(b, at("1"), "c1"), true);
      assert.equal(await repo.prune(at("5")), 2);
      assert.deepEqual(
        (await repo.list(a)).map((r) => r.tickAt),
        [at("3").toISOString()],
      );
      assert.deepEqual(
        (await repo.list(b)).map((r) => r.tickAt),
        [at("1").toISOString()],
      );
    });
  });
}
