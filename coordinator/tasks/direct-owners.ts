// Which coordinator serves a direct task (an endpoint, ASGI or realtime
// request it proxies itself). The answer lives only in the serving process:
// when it dies the caller's connection dies with it and nobody will end the
// task, so a coordinator that starts ends the open direct tasks it finds
// (DirectTasks.failOrphans) — but with several coordinators, only those no
// live coordinator still serves. It asks them on a core subject and waits a
// moment for their answers. The survivors ask the same question on a timer
// (coordinator/tasks/direct-orphans.ts), so a coordinator that stays dead
// leaves no request open either; `ask` also tells whether this coordinator
// heard its own question, which proves its NATS connection carried it.

import { setTimeout as sleep } from "node:timers/promises";
import { createInbox, type NatsConnection, type Subscription } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";

/** Core NATS, coordinator → coordinators: "which of these direct task ids do you serve?" (a JSON array). */
export const DIRECT_TASKS_OWNED_SUBJECT = "berth.cluster.direct-tasks-owned";
/** How long a starting coordinator waits for the others' answers. */
export const DIRECT_OWNERS_WAIT_MS = 1500;

export class DirectOwners {
  private sub: Subscription | undefined;
  private readonly enc = new TextEncoder();
  private readonly dec = new TextDecoder();
  /** Reply inboxes of this coordinator's questions in flight, and whether its own answerer heard each. */
  private readonly asking = new Map<string, { heard: boolean }>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly owns: (taskId: string) => boolean,
    private readonly log: Logger,
  ) {}

  /** Answers the other coordinators' questions from now on. */
  start(): void {
    this.sub = this.nc.subscribe(DIRECT_TASKS_OWNED_SUBJECT, {
      callback: (_e, m) => {
        if (!m.reply) return;
        const mine = this.asking.get(m.reply);
        if (mine) mine.heard = true;
        try {
          const ids = JSON.parse(this.dec.decode(m.data)) as unknown;
          const mine = Array.isArray(ids) ? ids.filter((id) => typeof id === "string" && this.owns(id)) : [];
          this.nc.publish(m.reply, this.enc.encode(JSON.stringify(mine)));
        } catch (e) {
          this.log.warn(
            { err: describeError(e) },
            "cannot answer which direct tasks this coordinator serves",
          );
        }
      },
    });
  }

  stop(): void {
    this.sub?.unsubscribe();
  }

  /** The ids among `ids` that a live coordinator answered it serves, within `waitMs`. */
  async servedElsewhere(ids: string[], waitMs = DIRECT_OWNERS_WAIT_MS): Promise<Set<string>> {
    return (await this.ask(ids, waitMs)).served;
  }

  /**
   * Asks every coordinator (this one included) which of `ids` it serves:
   * `served` holds the ids some coordinator claimed within `waitMs`;
   * `heardSelf` whether this coordinator's own answerer got the question
   * through NATS — when it did not, silence proves nothing (this coordinator
   * may be cut off) and the caller must not act on it.
   */
  async ask(
    ids: string[],
    waitMs = DIRECT_OWNERS_WAIT_MS,
  ): Promise<{ served: Set<string>; heardSelf: boolean }> {
    const served = new Set<string>();
    if (ids.length === 0) return { served, heardSelf: true };
    const inbox = createInbox();
    const state = { heard: false };
    this.asking.set(inbox, state);
    const sub = this.nc.subscribe(inbox, {
      callback: (_e, m) => {
        try {
          for (const id of JSON.parse(this.dec.decode(m.data)) as string[]) served.add(id);
        } catch {
          // An answer that is not a list claims nothing.
        }
      },
    });
    try {
      this.nc.publish(DIRECT_TASKS_OWNED_SUBJECT, this.enc.encode(JSON.stringify(ids)), { reply: inbox });
      // A connection that carries nothing (cut off, not yet noticed) never answers the flush: wait no longer than for answers.
      const flushed = this.nc.flush().catch(() => undefined);
      await Promise.race([flushed, sleep(waitMs)]);
      await sleep(waitMs);
    } finally {
      sub.unsubscribe();
      this.asking.delete(inbox);
    }
    return { served, heardSelf: state.heard };
  }
}
