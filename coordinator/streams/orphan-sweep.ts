// The loop both survivors' checks for a dead coordinator's work run
// (coordinator/images/build-orphans.ts, coordinator/tasks/direct-orphans.ts):
// every interval, the open records old enough to check that this coordinator
// does not hold are asked about through ClusterClaims (claims.ts), and a
// record nobody claimed on two checks in a row, at the same version, is
// ended. A check acts only when this coordinator heard its own question
// (silence from a connection that did not carry it proves nothing), so a
// coordinator cut off from NATS ends nothing; a lost answer is not enough,
// since it takes two checks an interval apart.

import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";

export interface OrphanSweepDeps<T> {
  /** The open records old enough to check (this coordinator's own may be among them). */
  listOpen: () => Promise<T[]>;
  /** The key the coordinators claim a record by. */
  key: (item: T) => string;
  /** A record is ended only if unclaimed twice at the same version (a newer record starts over). @default "" */
  version?: (item: T) => string;
  /** Whether this coordinator holds the record itself. */
  holds: (key: string) => boolean;
  /** Asks every coordinator which of `keys` it holds (ClusterClaims.ask). */
  ask: (keys: string[]) => Promise<{ claimed: Set<string>; heardSelf: boolean }>;
  /** Ends one orphan; false when the store had already moved on (another survivor, a newer record). */
  end: (item: T) => Promise<boolean>;
  log: Logger;
  /** The log lines: a skipped check, the ended count (its field and text), a failed check. */
  messages: { skipped: string; endedField: string; ended: string; failed: string };
}

export class OrphanSweep<T> {
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** Records unclaimed at the last check (key → the version seen). */
  private suspects = new Map<string, string>();

  constructor(private readonly d: OrphanSweepDeps<T>) {}

  start(intervalMs: number): void {
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One check; returns how many records it ended. */
  async check(): Promise<number> {
    if (this.running) return 0;
    this.running = true;
    const { d } = this;
    try {
      const open = (await d.listOpen()).filter((i) => !d.holds(d.key(i)));
      if (open.length === 0) {
        this.suspects.clear();
        return 0;
      }
      const { claimed, heardSelf } = await d.ask(open.map(d.key));
      if (!heardSelf) {
        this.suspects.clear();
        d.log.warn(d.messages.skipped);
        return 0;
      }
      const next = new Map<string, string>();
      let ended = 0;
      for (const i of open) {
        const key = d.key(i);
        if (claimed.has(key) || d.holds(key)) continue;
        const version = d.version?.(i) ?? "";
        if (this.suspects.get(key) !== version) next.set(key, version);
        else if (await d.end(i)) ended++;
      }
      this.suspects = next;
      if (ended > 0) d.log.warn({ [d.messages.endedField]: ended }, d.messages.ended);
      return ended;
    } catch (e) {
      d.log.warn({ err: describeError(e) }, d.messages.failed);
      return 0;
    } finally {
      this.running = false;
    }
  }
}
