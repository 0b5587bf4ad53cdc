// A fake clock shared by several tickers, each with its own fake timers.
// advanceTo() walks time forward timer by timer: tickers due at the same
// instant poll concurrently, and each poll is awaited (a ticker re-arms its
// timer when its poll ends, which is how the clock knows it is done).

import type { TickerTimers } from "../../coordinator/schedules/ticker.ts";

interface Pending {
  fn: () => void;
  at: number;
}

export class FakeTimers implements TickerTimers {
  pending: Pending | undefined;
  private armed: (() => void) | undefined;

  constructor(private readonly time: FakeTime) {}

  setTimeout(fn: () => void, ms: number): unknown {
    this.pending = { fn, at: this.time.nowMs + ms };
    this.armed?.();
    this.armed = undefined;
    return this.pending;
  }

  clearTimeout(handle: unknown): void {
    if (handle === this.pending) this.pending = undefined;
  }

  /** Runs the due callback and resolves when the ticker has armed its next timer. */
  fire(): Promise<void> {
    const p = this.pending;
    if (!p) throw new Error("no timer pending");
    this.pending = undefined;
    const rearmed = new Promise<void>((r) => {
      this.armed = r;
    });
    p.fn();
    return rearmed;
  }
}

export class FakeTime {
  readonly timers: FakeTimers[] = [];

  constructor(public nowMs: number) {}

  readonly clock = { now: () => new Date(this.nowMs) };

  newTimers(): FakeTimers {
    const t = new FakeTimers(this);
    this.timers.push(t);
    return t;
  }

  /** Moves the clock to `ms`, firing every timer due on the way, in time order. */
  async advanceTo(ms: number): Promise<void> {
    for (;;) {
      const due = this.timers.filter((t) => t.pending && t.pending.at <= ms);
      if (due.length === 0) break;
      const at = Math.min(...due.map((t) => t.pending?.at ?? ms));
      this.nowMs = Math.max(this.nowMs, at);
      await Promise.all(due.filter((t) => t.pending?.at === at).map((t) => t.fire()));
    }
    this.nowMs = Math.max(this.nowMs, ms);
  }
}
