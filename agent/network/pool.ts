// Namespaces (each with its veth pair already on the bridge, and for
// Network its addresses and routes too) made ahead of demand, so attaching a
// container costs its rules, not creation.

export interface PooledNamespace {
  netns: string;
  vethHost: string;
}

export interface NamespacePoolOptions<T extends PooledNamespace = PooledNamespace> {
  /** How many to keep ready. */
  size: number;
  create: () => Promise<T>;
  destroy: (ns: T) => Promise<void>;
  /** Told about background refill failures (the next take() creates on demand). */
  onError?: (e: unknown) => void;
  /**
   * How long after a take() the refill starts. Creating namespaces runs `ip`
   * processes that would otherwise compete for CPU with the start that just
   * took one (its runtime.run comes right after attach). 0 refills at once.
   */
  refillDelayMs?: number;
}

export class NamespacePool<T extends PooledNamespace = PooledNamespace> {
  private readonly ready: T[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;
  private refillTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: NamespacePoolOptions<T>) {}

  /** Namespaces ready right now. */
  get available(): number {
    return this.ready.length;
  }

  /** Fills the pool and resolves when it is full (or a creation failed). */
  async fill(): Promise<void> {
    this.cancelScheduledRefill();
    this.refill();
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  /** A ready namespace, or a new one when the pool is empty; refills in the background, a little later. */
  async take(): Promise<T> {
    const ns = this.ready.shift();
    this.scheduleRefill();
    if (ns) return ns;
    return this.opts.create();
  }

  private scheduleRefill(): void {
    const delay = this.opts.refillDelayMs ?? 0;
    if (delay <= 0) {
      this.refill();
      return;
    }
    // Each take() pushes the refill back, so a burst of starts is not slowed by it.
    this.cancelScheduledRefill();
    this.refillTimer = setTimeout(() => {
      this.refillTimer = undefined;
      this.refill();
    }, delay);
    this.refillTimer.unref();
  }

  private cancelScheduledRefill(): void {
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.refillTimer = undefined;
  }

  private refill(): void {
    while (!this.closed && this.ready.length + this.inFlight.size < this.opts.size) {
      const p: Promise<void> = this.opts
        .create()
        .then(async (ns) => {
          if (this.closed) {
            await this.opts.destroy(ns);
            return;
          }
          this.ready.push(ns);
        })
        .catch((e) => this.opts.onError?.(e))
        .finally(() => this.inFlight.delete(p));
      this.inFlight.add(p);
    }
  }

  /** Stops refilling, waits for creations in flight and destroys every ready namespace. */
  async shutdown(): Promise<void> {
    this.closed = true;
    this.cancelScheduledRefill();
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
    const all = this.ready.splice(0);
    await Promise.all(all.map((ns) => this.opts.destroy(ns).catch((e) => this.opts.onError?.(e))));
  }
}
