// The host's own addresses, cached: a container's resolv.conf must not name a
// nameserver on the host itself, but reading them costs an `ip` process, and
// attach is on every container's start path. They change rarely (DHCP
// renewals, an interface coming up), so a few seconds old is good enough.

export class HostAddressCache {
  private value: string[] | undefined;
  private readAt = 0;
  private refreshing: Promise<string[]> | undefined;

  /**
   * @param read reads the addresses now
   * @param maxAgeMs older than this, get() answers from the cache and refreshes
   *   it in the background; 0 reads on every get()
   * @param onError told about failed background refreshes (the old list stays)
   * @param now clock, for tests
   */
  constructor(
    private readonly read: () => Promise<string[]>,
    private readonly maxAgeMs: number,
    private readonly onError: (e: unknown) => void = () => {},
    private readonly now: () => number = Date.now,
  ) {}

  async get(): Promise<string[]> {
    if (this.maxAgeMs === 0 || this.value === undefined) return this.refresh();
    if (this.now() - this.readAt > this.maxAgeMs) this.refresh().catch((e) => this.onError(e));
    return this.value;
  }

  /** Takes a list read elsewhere (start() reads them anyway) as fresh. */
  set(addresses: string[]): void {
    this.value = addresses;
    this.readAt = this.now();
  }

  /** Reads now; concurrent callers share one read. */
  refresh(): Promise<string[]> {
    if (!this.refreshing) {
      this.refreshing = this.read()
        .then((addresses) => {
          this.set(addresses);
          return addresses;
        })
        .finally(() => {
          this.refreshing = undefined;
        });
    }
    return this.refreshing;
  }
}
