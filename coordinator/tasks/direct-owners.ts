// Which coordinator serves a direct task (an endpoint, ASGI or realtime
// request it proxies itself). The answer lives only in the serving process:
// when it dies the caller's connection dies with it and nobody will end the
// task, so a coordinator that starts ends the open direct tasks it finds
// (DirectTasks.failOrphans) — but with several coordinators, only those no
// live coordinator still serves. It asks them on a core subject and waits a
// moment for their answers.

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
    const served = new Set<string>();
    if (ids.length === 0) return served;
    const inbox = createInbox();
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
      await this.nc.flush();
      await new Promise((r) => setTimeout(r, waitMs));
    } finally {
      sub.unsubscribe();
    }
    return served;
  }
}
