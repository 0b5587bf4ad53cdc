// A bot session's messages, heard on every coordinator. A session's websocket
// may be connected to any coordinator while another one pushes its markers
// or settles its firing: each engine sends what it emits on one core NATS
// subject, and every coordinator (the sender included) hands what it hears to
// the session's local listeners. Core NATS, not JetStream: a websocket that
// was not connected when a message went by reads the session itself (REST or
// a reconnect), so nothing needs replaying.

import type { NatsConnection, Subscription } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { BotSessionMessage } from "./engine.ts";

/** Core NATS, coordinator → coordinators: `{ session, message }` of a bot session. Agents may not subscribe to it. */
export const BOT_SESSION_EVENTS_SUBJECT = "berth.cluster.bot-session-events";

/** How an engine sends its sessions' messages to every coordinator's listeners. */
export interface BotEventBus {
  publish(sessionId: string, m: BotSessionMessage): void;
  /** Hears every coordinator's messages (this one's too) until the returned function is called. */
  listen(deliver: (sessionId: string, m: BotSessionMessage) => void): () => void;
}

export class NatsBotEventBus implements BotEventBus {
  private readonly enc = new TextEncoder();
  private readonly dec = new TextDecoder();

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {}

  publish(sessionId: string, message: BotSessionMessage): void {
    try {
      this.nc.publish(
        BOT_SESSION_EVENTS_SUBJECT,
        this.enc.encode(JSON.stringify({ session: sessionId, message })),
      );
    } catch (e) {
      // A closed or draining connection: the session in the store is still right.
      this.log.warn(
        { sessionId, err: describeError(e) },
        "bots: cannot send a session message to the coordinators",
      );
    }
  }

  listen(deliver: (sessionId: string, m: BotSessionMessage) => void): () => void {
    const sub: Subscription = this.nc.subscribe(BOT_SESSION_EVENTS_SUBJECT, {
      callback: (err, m) => {
        if (err) return;
        try {
          const { session, message } = JSON.parse(this.dec.decode(m.data)) as {
            session: unknown;
            message: BotSessionMessage;
          };
          if (typeof session === "string" && message && typeof message === "object")
            deliver(session, message);
        } catch (e) {
          this.log.warn({ err: describeError(e) }, "bots: a session message that is not JSON was dropped");
        }
      },
    });
    return () => sub.unsubscribe();
  }
}
