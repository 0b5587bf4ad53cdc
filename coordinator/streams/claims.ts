// A question every coordinator answers on a core NATS subject: "which of
// these ids do you hold?" (direct tasks it serves, image builds it runs).
// What a coordinator holds in memory dies with it; the survivors ask, and
// what nobody claims belongs to a dead one (coordinator/tasks/direct-orphans.ts,
// coordinator/images/build-orphans.ts). A coordinator answers its own
// question too: `ask` says whether it heard it, which proves its NATS
// connection carried the question — silence heard over a connection that
// carries nothing proves nothing.

import { setTimeout as sleep } from "node:timers/promises";
import { createInbox, type NatsConnection, type Subscription } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";

/** How long a question waits for the coordinators' answers by default. */
export const CLAIMS_WAIT_MS = 1500;

export class ClusterClaims {
  private sub: Subscription | undefined;
  private readonly enc = new TextEncoder();
  private readonly dec = new TextDecoder();
  /** Reply inboxes of this coordinator's questions in flight, and whether its own answerer heard each. */
  private readonly asking = new Map<string, { heard: boolean }>();

  constructor(
    private readonly nc: NatsConnection,
    /** The core subject of the question (a JSON array of ids; the answer is the array of those held). */
    private readonly subject: string,
    private readonly holds: (id: string) => boolean,
    private readonly log: Logger,
  ) {}

  /** Answers the other coordinators' questions from now on. */
  start(): void {
    this.sub = this.nc.subscribe(this.subject, {
      callback: (_e, m) => {
        if (!m.reply) return;
        const mine = this.asking.get(m.reply);
        if (mine) mine.heard = true;
        try {
          const ids = JSON.parse(this.dec.decode(m.data)) as unknown;
          const held = Array.isArray(ids) ? ids.filter((id) => typeof id === "string" && this.holds(id)) : [];
          this.nc.publish(m.reply, this.enc.encode(JSON.stringify(held)));
        } catch (e) {
          this.log.warn(
            { err: describeError(e), subject: this.subject },
            "cannot answer the coordinators' question",
          );
        }
      },
    });
  }

  stop(): void {
    this.sub?.unsubscribe();
  }

  /**
   * Asks every coordinator (this one included) which of `ids` it holds:
   * `claimed` has the ids some coordinator claimed within `waitMs`;
   * `heardSelf` whether this coordinator's own answerer got the question
   * through NATS — when it did not, the caller must not act on the silence.
   */
  async ask(ids: string[], waitMs = CLAIMS_WAIT_MS): Promise<{ claimed: Set<string>; heardSelf: boolean }> {
    const claimed = new Set<string>();
    if (ids.length === 0) return { claimed, heardSelf: true };
    const inbox = createInbox();
    const state = { heard: false };
    this.asking.set(inbox, state);
    const sub = this.nc.subscribe(inbox, {
      callback: (_e, m) => {
        try {
          for (const id of JSON.parse(this.dec.decode(m.data)) as string[]) claimed.add(id);
        } catch {
          // An answer that is not a list claims nothing.
        }
      },
    });
    try {
      this.nc.publish(this.subject, this.enc.encode(JSON.stringify(ids)), { reply: inbox });
      // A connection that carries nothing (cut off, not yet noticed) never answers the flush: wait no longer than for answers.
      const flushed = this.nc.flush().catch(() => undefined);
      await Promise.race([flushed, sleep(waitMs)]);
      await sleep(waitMs);
    } finally {
      sub.unsubscribe();
      this.asking.delete(inbox);
    }
    return { claimed, heardSelf: state.heard };
  }
}
