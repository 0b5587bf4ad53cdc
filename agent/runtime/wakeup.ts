// A level-free wake-up: waiters sleep until notify() or their timeout. Lets
// one container's waits (start, stop grace) react at once to a child-exit
// event instead of waiting out a poll interval.

export class Wakeup {
  private waiters = new Set<() => void>();

  notify(): void {
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w();
  }

  /** Resolves on the next notify() or after ms, whichever comes first. */
  wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  /** Waits until cond() holds (checked after every wake-up); false on timeout. */
  async until(cond: () => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!cond()) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await this.wait(left);
    }
    return true;
  }
}
