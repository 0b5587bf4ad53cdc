// One producer (a build), many followers: every event is kept (a producer emits a bounded
// number: a build, its steps and their output lines), so a request that joins a running
// build sees it from the start, then live, and ends as the build ends.

export class Fanout<E> {
  private readonly events: E[] = [];
  private finished = false;
  private error: unknown;
  private wake: (() => void)[] = [];

  /** Runs `fn`; its emitted events and its end reach every follower. Never rejects. */
  run(fn: (emit: (e: E) => void) => Promise<void>): Promise<void> {
    const emit = (e: E) => {
      this.events.push(e);
      this.notify();
    };
    return fn(emit).then(
      () => this.finish(undefined),
      (e: unknown) => this.finish(e ?? new Error("build failed")),
    );
  }

  private finish(error: unknown): void {
    this.error = error;
    this.finished = true;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = [];
    for (const f of w) f();
  }

  /** Every event from the first; throws the build's error at the end. Aborting stops following (the build goes on). */
  async *follow(signal?: AbortSignal): AsyncGenerator<E> {
    let next = 0;
    for (;;) {
      while (next < this.events.length) yield this.events[next++] as E;
      if (this.finished) {
        if (this.error !== undefined) throw this.error;
        return;
      }
      if (signal?.aborted) return;
      await new Promise<void>((resolve) => {
        this.wake.push(resolve);
        signal?.addEventListener("abort", () => resolve(), { once: true });
      });
    }
  }
}
