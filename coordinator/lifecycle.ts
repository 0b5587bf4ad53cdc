// The coordinator's start and stop as one stack: each step that starts
// something says at once how to stop it, so a failure at any step stops
// everything started before it, in reverse order, and shutdown walks the
// same stack. Nothing is torn down by hand at each failure point.

import type { Logger } from "pino";
import { describeError } from "../shared/errors.ts";
import type { Area } from "./http/index.ts";

/** What a started part leaves to undo: called once, in reverse order of starting. */
export type Stop = () => Promise<void> | void;

/** Called before each step with its name: tests make start-up fail at a chosen step. */
export type StepHook = (name: string) => void | Promise<void>;

/** A step that failed: its name and the cause. */
export class StepFailed extends Error {
  constructor(
    readonly step: string,
    override readonly cause: unknown,
  ) {
    super(`${step}: ${describeError(cause)}`);
  }
}

export class Lifecycle {
  private readonly stops: { name: string; stop: Stop }[] = [];
  private stopping: Promise<void> | undefined;

  constructor(
    private readonly log: Logger,
    private readonly beforeStep?: StepHook,
  ) {}

  /**
   * Runs `start`; when it succeeds, `stop(value)` joins the stack. A failure
   * is a StepFailed naming the step; nothing of the step itself is left (a
   * start that fails half way undoes its own half).
   */
  async step<T>(
    name: string,
    start: () => T | Promise<T>,
    stop?: (value: T) => Promise<void> | void,
  ): Promise<T> {
    let value: T;
    try {
      await this.beforeStep?.(name);
      value = await start();
    } catch (e) {
      throw e instanceof StepFailed ? e : new StepFailed(name, e);
    }
    if (stop) this.stops.push({ name, stop: () => stop(value) });
    return value;
  }

  /**
   * Builds an area with its factory and starts it, as one step: a failure
   * of either is the step's; once started, its stop joins the stack. The
   * factory runs inside the step, so that nothing it makes exists when a
   * step before it failed.
   */
  area<A extends Area<unknown>>(name: string, build: () => A): Promise<A> {
    return this.step(
      name,
      async () => {
        const area = build();
        await area.start?.();
        return area;
      },
      (area) => area.stop?.(),
    );
  }

  /**
   * Stops every started part, last started first. A part whose stop fails is
   * logged and the others still stop. Called twice, the second call waits for
   * the first.
   */
  stopAll(): Promise<void> {
    this.stopping ??= (async () => {
      for (let part = this.stops.pop(); part; part = this.stops.pop()) {
        try {
          await part.stop();
        } catch (e) {
          this.log.error({ part: part.name, err: describeError(e) }, "stopping a part failed");
        }
      }
    })();
    return this.stopping;
  }
}
