// Task ids seen recently (cancelled ones), forgotten after a while and
// bounded in size: a cancel only matters while the task's message may still
// be delivered or running, and the coordinator also deletes it from the stream.

export class RecentSet {
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxSize: number,
    private readonly now: () => number = Date.now,
  ) {}

  add(id: string): void {
    this.seen.delete(id);
    this.seen.set(id, this.now());
    this.prune();
  }

  has(id: string): boolean {
    const at = this.seen.get(id);
    if (at === undefined) return false;
    if (this.now() - at > this.ttlMs) {
      this.seen.delete(id);
      return false;
    }
    return true;
  }

  get size(): number {
    return this.seen.size;
  }

  /** Insertion order is age order: drop from the front. */
  private prune(): void {
    const cutoff = this.now() - this.ttlMs;
    for (const [id, at] of this.seen) {
      if (at >= cutoff && this.seen.size <= this.maxSize) break;
      this.seen.delete(id);
    }
  }
}
