// Ends this coordinator missed. Each task event is written by the one
// coordinator that consumed it, which then relays it to the others on core
// NATS (event-consumer.ts). Core NATS delivers at most once: a coordinator
// that is between NATS nodes when another commits a task's end never hears
// it, and its live copy would stay open for good: a `.map()` streaming from
// it, or a caller waiting on the result there, would wait for ever.
//
// The catch-up reads the rows of the tasks this coordinator still holds open
// and takes in the ends it missed (TaskEngine.takeEnded): right after each
// reconnect to NATS (and once more a little later, for ends whose relay was
// still in flight), and every `everyMs` for copies unchanged that long. The
// periodic read is for relays lost without this coordinator reconnecting (a
// node that died with the relay in it, on its way to this coordinator's
// node): such an end is taken in within twice `everyMs`. It costs one query
// per 500 such tasks; a copy that changes more often is never read.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { TaskEngine } from "./engine.ts";
import type { TaskRepo } from "./store.ts";
import { isTerminal } from "./transitions.ts";

export interface TaskCatchUpOptions {
  /** How often open copies unchanged this long are read. @default 15000 */
  everyMs?: number;
  /** The second read after a reconnect. @default 5000 */
  againAfterMs?: number;
}

export class TaskCatchUp {
  private timer: NodeJS.Timeout | undefined;
  private readonly later = new Set<NodeJS.Timeout>();
  private running: Promise<void> | undefined;
  private stopped = false;
  private readonly everyMs: number;
  private readonly againAfterMs: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly engine: TaskEngine,
    private readonly tasks: TaskRepo,
    private readonly log: Logger,
    private readonly clock: () => number,
    o: TaskCatchUpOptions = {},
  ) {
    this.everyMs = o.everyMs ?? 15_000;
    this.againAfterMs = o.againAfterMs ?? 5000;
  }

  start(): void {
    // The status iterator ends when the connection closes; a stopped catch-up leaves it at its next status.
    void (async () => {
      for await (const s of this.nc.status()) {
        if (this.stopped) break;
        if (s.type === "reconnect") this.afterReconnect();
      }
    })();
    this.timer = setInterval(() => void this.sweep(this.everyMs), this.everyMs);
    this.timer.unref();
  }

  stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    for (const t of this.later) clearTimeout(t);
    this.later.clear();
    return this.running ?? Promise.resolve();
  }

  /**
   * Reads the rows of the open copies unchanged for `unchangedForMs` (all of
   * them with 0) and takes in those that ended. One read at a time: a call
   * while one runs waits for it. Answers how many ends were taken in.
   */
  async sweep(unchangedForMs = 0): Promise<number> {
    while (this.running) await this.running;
    let taken = 0;
    const run = (async () => {
      const before = this.clock() - unchangedForMs;
      const ids: string[] = [];
      for (const t of this.engine.index.values()) {
        if (isTerminal(t.status) || this.engine.isUnwritten(t.id)) continue;
        if (unchangedForMs > 0 && Date.parse(t.updatedAt) > before) continue;
        ids.push(t.id);
      }
      if (ids.length === 0) return;
      for (const row of await this.tasks.endedAmong(ids)) {
        const t = this.engine.index.get(row.id);
        if (t && this.engine.takeEnded(t, row)) taken++;
      }
      if (taken > 0)
        this.log.info(
          { tasks: taken },
          "took in task ends committed by another coordinator whose relay was missed",
        );
    })().catch((e) => this.log.warn({ err: describeError(e) }, "cannot read task rows to catch up"));
    this.running = run;
    try {
      await run;
    } finally {
      this.running = undefined;
    }
    return taken;
  }

  private afterReconnect(): void {
    if (this.stopped) return;
    void this.sweep();
    const t = setTimeout(() => {
      this.later.delete(t);
      void this.sweep();
    }, this.againAfterMs);
    t.unref();
    this.later.add(t);
  }
}
