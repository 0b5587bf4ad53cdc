/**
 * Many shared holders (pulls, imports) or one exclusive holder (remove, GC,
 * which delete blobs a running pull may have written but not yet tagged).
 * Waiting exclusive holders block new shared ones, so GC is not starved.
 */
export class SharedExclusiveLock {
  private shared = 0;
  private exclusive = false;
  private waiters: Array<{ exclusive: boolean; wake: () => void }> = [];

  async withShared<T>(fn: () => Promise<T>): Promise<T> {
    await this.acquire(false);
    try {
      return await fn();
    } finally {
      this.shared--;
      this.pump();
    }
  }

  async withExclusive<T>(fn: () => Promise<T>): Promise<T> {
    await this.acquire(true);
    try {
      return await fn();
    } finally {
      this.exclusive = false;
      this.pump();
    }
  }

  private canGrant(exclusive: boolean): boolean {
    if (this.exclusive) return false;
    return exclusive ? this.shared === 0 : !this.waiters.some((w) => w.exclusive);
  }

  private acquire(exclusive: boolean): Promise<void> {
    if (this.waiters.length === 0 && this.canGrant(exclusive)) {
      this.grant(exclusive);
      return Promise.resolve();
    }
    return new Promise((wake) => this.waiters.push({ exclusive, wake }));
  }

  private grant(exclusive: boolean): void {
    if (exclusive) this.exclusive = true;
    else this.shared++;
  }

  private pump(): void {
    while (this.waiters.length > 0) {
      const next = this.waiters[0]!;
      if (this.exclusive || (next.exclusive && this.shared > 0)) return;
      this.waiters.shift();
      this.grant(next.exclusive);
      next.wake();
      if (next.exclusive) return;
    }
  }
}
