// A debug trace of each task message's life on this agent: which pull
// fetched it, which hand-out took it, releases, holds, acks and naks, with
// wall-clock timestamps. Off unless the agent is started with
// BERTH_TASK_TRACE naming a file (read where the agent is wired,
// cli/commands/agent.ts); lines are buffered and appended a few times a
// second, so a traced `.map()` of 10,000 items keeps its pace.

import { appendFileSync } from "node:fs";

/** How long an event waits in the buffer before it is appended. */
const FLUSH_MS = 200;
/** A buffer this long is appended at once. */
const FLUSH_LINES = 2000;

export class TaskTrace {
  /** Whether tracing is on: callers skip building an event's fields when it is not. */
  readonly on: boolean;
  private lines: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastId = 0;

  /** `path` undefined (or empty): the trace is off and writes nothing. */
  constructor(private readonly path?: string) {
    this.on = path !== undefined && path !== "";
  }

  /** A number naming one pull or hand-out in the trace. */
  nextId(): number {
    return ++this.lastId;
  }

  /** Appends one event: `<unix ms> <event> <json fields>`. */
  event(name: string, fields: Record<string, unknown>): void {
    if (!this.on) return;
    this.lines.push(
      `${(performance.timeOrigin + performance.now()).toFixed(3)} ${name} ${JSON.stringify(fields)}\n`,
    );
    if (this.lines.length >= FLUSH_LINES) this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), FLUSH_MS);
      this.timer.unref?.();
    }
  }

  /**
   * Appends what is buffered (the task worker's close: an agent that stops
   * keeps its last lines). An event after it is buffered again as before.
   */
  close(): void {
    this.flush();
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.path || this.lines.length === 0) return;
    const out = this.lines.join("");
    this.lines = [];
    try {
      appendFileSync(this.path, out);
    } catch {
      // A debug aid: a trace that cannot be written is dropped, not fatal.
    }
  }
}
