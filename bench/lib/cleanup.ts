import { describeError } from "../../shared/errors.ts";

type Action = { what: string; fn: () => Promise<void> | void };

/**
 * Undo actions (remove a temp dir, stop a daemon by pid, unmount), run last
 * registered first, once, whether the benchmark finished, threw or got
 * Ctrl-C. Every action runs even when an earlier one fails; failures are
 * printed, because a benchmark that leaves mounts or daemons behind must say so.
 */
export class Cleanup {
  private readonly actions: Action[] = [];
  private running?: Promise<void>;

  add(what: string, fn: () => Promise<void> | void): void {
    this.actions.push({ what, fn });
  }

  run(): Promise<void> {
    this.running ??= (async () => {
      for (const a of this.actions.reverse()) {
        try {
          await a.fn();
        } catch (e) {
          console.error(`cleanup: ${a.what} failed: ${describeError(e)}`);
        }
      }
      this.actions.length = 0;
    })();
    return this.running;
  }

  /** Set by the first SIGINT/SIGTERM: the benchmark should stop starting new work. */
  interrupted: NodeJS.Signals | undefined;

  /**
   * The first SIGINT/SIGTERM only sets `interrupted`: the benchmark finishes
   * the step in flight (every step is bounded by a timeout), leaves its loop
   * and runs the cleanup itself, so no child process is started after its
   * daemon or temp dir is gone. A second signal runs the cleanup at once and
   * exits (130/143). Returns a function that removes the handlers again.
   */
  onSignals(): () => void {
    const handler = (sig: NodeJS.Signals) => {
      if (!this.interrupted) {
        this.interrupted = sig;
        console.error(`\n${sig}: finishing the current step, then cleaning up (again to clean up now)...`);
        return;
      }
      console.error(`\n${sig}: cleaning up now...`);
      void this.run().finally(() => process.exit(sig === "SIGINT" ? 130 : 143));
    };
    process.on("SIGINT", handler);
    process.on("SIGTERM", handler);
    return () => {
      process.off("SIGINT", handler);
      process.off("SIGTERM", handler);
    };
  }
}
