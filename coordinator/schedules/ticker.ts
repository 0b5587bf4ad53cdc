// Fires deployed schedules: each tick of each active schedule is submitted
// as a task exactly once across every coordinator sharing the store.
//
// Every second the ticker reads the active schedules and, for each, works
// out the latest tick due (at or before now, at or after the schedule's
// `since`). A tick this ticker has not handled yet is claimed by inserting
// (stub, tick) into schedule_ticks; only the coordinator whose insert lands
// submits the task. Ticks missed while no coordinator ran are not replayed:
// only the latest one fires, once, when a coordinator comes back.

import type { Logger } from "pino";
import { type CronSchedule, parseCron, previousFire, nextFire } from "./cron.ts";
import { describeError } from "../../shared/errors.ts";

export interface ActiveSchedule {
  stubId: string;
  workspaceId: string;
  /** The cron expression (cron.ts syntax, UTC). */
  when: string;
  /** When the schedule was deployed or started: no tick before it fires. */
  since: Date;
}

/** Where the ticker learns which schedules run (the deployments). */
export interface ScheduleSource {
  activeSchedules(): Promise<ActiveSchedule[]>;
}

/** The store side: who fired which tick. */
export interface TickClaims {
  /** True only for the one caller whose insert of (stubId, tickAt) landed. */
  claim(stubId: string, tickAt: Date, coordinatorId: string): Promise<boolean>;
  recordTask(stubId: string, tickAt: Date, taskId: string): Promise<void>;
  /** Forgets ticks older than `before`, keeping each schedule's newest. */
  prune?(before: Date): Promise<number>;
}

/** Submits the schedule's function as a task; returns the task id. */
export type SubmitTick = (stubId: string, workspaceId: string, tickAt: Date) => Promise<string>;

export interface TickerTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface ScheduleTickerOptions {
  /** Names this coordinator in schedule_ticks.coordinator_id. */
  coordinatorId: string;
  source: ScheduleSource;
  claims: TickClaims;
  submit: SubmitTick;
  log: Logger;
  /** @default the system clock */
  clock?: { now(): Date };
  /** @default the global setTimeout and clearTimeout */
  timers?: TickerTimers;
  /** How often the source is read and due ticks fired, on whole multiples of it. @default 1000 */
  pollIntervalMs?: number;
  /** Ticks older than this are deleted from the store (each schedule's newest stays). @default 7 days */
  keepTicksMs?: number;
  /** @default 1 hour */
  pruneEveryMs?: number;
}

/** What the ticker remembers of one schedule between polls. */
interface ScheduleState {
  when: string;
  /** Undefined when the expression does not parse (logged once). */
  cron?: CronSchedule;
  /** The latest tick this ticker has tried to claim (ms). */
  handled?: number;
  /** No tick is due before this (ms); saves recomputing every poll. */
  nextDue?: number;
  /** A tick this ticker claimed but could not submit yet (ms). */
  unsubmitted?: number;
}

const systemTimers: TickerTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

export class ScheduleTicker {
  private readonly o: Required<Omit<ScheduleTickerOptions, "clock" | "timers">>;
  private readonly clock: { now(): Date };
  private readonly timers: TickerTimers;
  private readonly state = new Map<string, ScheduleState>();
  private running = false;
  private timer: unknown;
  private polling: Promise<void> | undefined;
  private lastPrune: number | undefined;

  constructor(o: ScheduleTickerOptions) {
    this.o = {
      pollIntervalMs: 1000,
      keepTicksMs: 7 * 24 * 3600_000,
      pruneEveryMs: 3600_000,
      ...o,
    };
    this.clock = o.clock ?? { now: () => new Date() };
    this.timers = o.timers ?? systemTimers;
  }

  /** Starts polling: at once, then on every whole poll interval. */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.arm(0);
  }

  /** Stops polling; resolves once a poll in progress (and its submits) has finished. */
  async stop(): Promise<void> {
    this.running = false;
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
    this.timer = undefined;
    await this.polling;
  }

  /** One pass over the active schedules; a pass already running is shared, not doubled. */
  pollOnce(): Promise<void> {
    this.polling ??= this.poll().finally(() => {
      this.polling = undefined;
    });
    return this.polling;
  }

  private arm(ms: number): void {
    this.timer = this.timers.setTimeout(() => {
      this.timer = undefined;
      void this.pollOnce().finally(() => {
        if (!this.running) return;
        const every = this.o.pollIntervalMs;
        this.arm(every - (this.clock.now().getTime() % every));
      });
    }, ms);
  }

  private async poll(): Promise<void> {
    const now = this.clock.now().getTime();
    let schedules: ActiveSchedule[];
    try {
      schedules = await this.o.source.activeSchedules();
    } catch (e) {
      this.o.log.warn({ err: describeError(e) }, "schedules: cannot read the active schedules; trying again");
      return;
    }
    const active = new Set(schedules.map((s) => s.stubId));
    for (const id of this.state.keys()) if (!active.has(id)) this.state.delete(id);
    await Promise.all(schedules.map((s) => this.check(s, now)));
    await this.prune(now);
  }

  private check(s: ActiveSchedule, now: number): Promise<void> {
    let st = this.state.get(s.stubId);
    if (st?.when !== s.when) {
      st = { when: s.when };
      try {
        st.cron = parseCron(s.when);
      } catch (e) {
        // Deploys refuse such expressions; one that reaches here (an older
        // row, a parser change) stops only its own schedule.
        this.o.log.error(
          { stubId: s.stubId, workspaceId: s.workspaceId, when: s.when, err: describeError(e) },
          "schedules: skipping a schedule whose expression does not parse",
        );
      }
      this.state.set(s.stubId, st);
    }
    const cron = st.cron;
    if (!cron) return Promise.resolve();
    if (st.nextDue !== undefined && now < st.nextDue) return Promise.resolve();
    const since = s.since.getTime();
    const due = previousFire(cron, new Date(now + 1)).getTime();
    if (due < since) {
      st.nextDue = nextFire(cron, new Date(since - 1)).getTime();
      return Promise.resolve();
    }
    st.nextDue = nextFire(cron, new Date(due)).getTime();
    if (st.handled !== undefined && due <= st.handled) {
      if (st.unsubmitted === due) return this.submit(s, st, due);
      return Promise.resolve();
    }
    return this.claim(s, st, due);
  }

  private async claim(s: ActiveSchedule, st: ScheduleState, due: number): Promise<void> {
    const before = st.handled;
    st.handled = due;
    st.unsubmitted = undefined;
    let won: boolean;
    try {
      won = await this.o.claims.claim(s.stubId, new Date(due), this.o.coordinatorId);
    } catch (e) {
      // Try this tick again on the next poll.
      st.handled = before;
      st.nextDue = undefined;
      this.o.log.warn(
        { stubId: s.stubId, tickAt: new Date(due).toISOString(), err: describeError(e) },
        "schedules: cannot claim a tick; trying again",
      );
      return;
    }
    if (won) await this.submit(s, st, due);
  }

  private async submit(s: ActiveSchedule, st: ScheduleState, due: number): Promise<void> {
    const tickAt = new Date(due);
    let taskId: string;
    try {
      taskId = await this.o.submit(s.stubId, s.workspaceId, tickAt);
    } catch (e) {
      // The tick is ours; no other coordinator will submit it. Retried on
      // every poll until it goes through or a newer tick replaces it.
      st.unsubmitted = due;
      st.nextDue = undefined;
      this.o.log.warn(
        { stubId: s.stubId, tickAt: tickAt.toISOString(), err: describeError(e) },
        "schedules: cannot submit a claimed tick; trying again",
      );
      return;
    }
    if (st.unsubmitted === due) st.unsubmitted = undefined;
    this.o.log.info({ stubId: s.stubId, tickAt: tickAt.toISOString(), taskId }, "schedules: tick submitted");
    try {
      await this.o.claims.recordTask(s.stubId, tickAt, taskId);
    } catch (e) {
      this.o.log.warn(
        { stubId: s.stubId, tickAt: tickAt.toISOString(), taskId, err: describeError(e) },
        "schedules: cannot record a tick's task id",
      );
    }
  }

  private async prune(now: number): Promise<void> {
    const prune = this.o.claims.prune?.bind(this.o.claims);
    if (!prune) return;
    if (this.lastPrune !== undefined && now - this.lastPrune < this.o.pruneEveryMs) return;
    this.lastPrune = now;
    try {
      const n = await prune(new Date(now - this.o.keepTicksMs));
      if (n > 0) this.o.log.debug({ deleted: n }, "schedules: old ticks pruned");
    } catch (e) {
      this.o.log.warn({ err: describeError(e) }, "schedules: cannot prune old ticks");
    }
  }
}
