// One run per key at a time: a second caller with the same key gets the
// first one's promise (an image pulled once for many starts, a container
// removed once when several coordinators ask). Agent-wide: the image store,
// the runtime, the host and the bucket mounts use it.

/** Runs `fn` once per key at a time; callers with the same key share its promise. */
export class SingleFlight<T> {
  private readonly inflight = new Map<string, Promise<T>>();

  run(key: string, fn: () => Promise<T>): Promise<T> {
    const existing = this.inflight.get(key);
    if (existing) return existing;
    const p = fn().finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return p;
  }
}
