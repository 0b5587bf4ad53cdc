// A value per key, loaded on a miss and trusted for `ttlMs` after: the
// container manager asks for a stub and its workspace's limits on every
// reconcile while tasks wait, and the store need not answer each time.

export class TimedCache<K, V> {
  private readonly entries = new Map<K, { value: V; at: number }>();

  constructor(private readonly ttlMs: number) {}

  /** The cached value of `key` when loaded less than ttlMs before `now`, else `load()`'s (then cached). */
  async get(key: K, now: number, load: () => Promise<V>): Promise<V> {
    const hit = this.entries.get(key);
    if (hit && now - hit.at < this.ttlMs) return hit.value;
    const value = await load();
    this.entries.set(key, { value, at: now });
    return value;
  }

  /** The value last loaded for `key`, however old; undefined when never loaded. */
  peek(key: K): V | undefined {
    return this.entries.get(key)?.value;
  }

  delete(key: K): void {
    this.entries.delete(key);
  }

  keys(): IterableIterator<K> {
    return this.entries.keys();
  }
}
