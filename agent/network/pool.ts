// Namespaces (each with its veth pair already on the bridge) made ahead of
// demand, so attaching a container costs addresses and rules, not creation.

export interface PooledNamespace {
  netns: string;
  vethHost: string;
}

export interface NamespacePoolOptions {
  /** How many to keep ready. */
  size: number;
  create: () => Promise<PooledNamespace>;
  destroy: (ns: PooledNamespace) => Promise<void>;
  /** Told about background refill failures (the next take() creates on demand). */
  onError?: (e: unknown) => void;
}

export class NamespacePool {
  private readonly ready: PooledNamespace[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly opts: NamespacePoolOptions) {}

  /** Namespaces ready right now. */
  get available(): number {
    return this.ready.length;
  }

  /** Fills the pool and resolves when it is full (or a creation failed). */
  async fill(): Promise<void> {
    this.refill();
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  /** A ready namespace, or a new one when the pool is empty; refills in the background. */
  async take(): Promise<PooledNamespace> {
    const ns = this.ready.shift();
    this.refill();
    if (ns) return ns;
    return this.opts.create();
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
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
    const all = this.ready.splice(0);
    await Promise.all(all.map((ns) => this.opts.destroy(ns).catch((e) => this.opts.onError?.(e))));
  }
}
