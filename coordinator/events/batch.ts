// How events sit in the stream: the events a workspace emits within one
// short window are stored as ONE JetStream message whose body is a JSON
// array (docs/events.md "Storage"), so an endpoint request's three task
// events cost one acknowledged publish, not three. Readers expand messages
// here; a position inside the stream is `{seq}:{index}` (message, event).
// Messages written before batching hold one event object; they read as a
// batch of one.

import type { JsMsg } from "nats";
import type { Logger } from "pino";
import { describeError, invalid } from "../../shared/errors.ts";
import type { BerthEvent } from "./types.ts";

/** Where one event is stored: its message's stream sequence and its index in that message. */
export interface EventPosition {
  seq: number;
  index: number;
}

/** A batch stays well under nats-server's default max_payload (1 MiB). */
export const MAX_BATCH_BYTES = 256 * 1024;

/** The body of one stored message: the events' JSON, already serialized one by one. */
export const batchBody = (json: readonly string[]): string => `[${json.join(",")}]`;

const dec = new TextDecoder();

const isEvent = (v: unknown): v is BerthEvent =>
  typeof v === "object" &&
  v !== null &&
  typeof (v as BerthEvent).id === "string" &&
  typeof (v as BerthEvent).type === "string" &&
  typeof (v as BerthEvent).time === "string";

/** The events of one stored message, in the order they were emitted; [] (logged) for a message that holds none. */
export function decodeBatch(m: Pick<JsMsg, "data" | "seq">, log: Logger): BerthEvent[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(dec.decode(m.data));
  } catch (e) {
    log.warn({ seq: m.seq, err: describeError(e) }, "events: skipping a message that is not JSON");
    return [];
  }
  const items = Array.isArray(parsed) ? parsed : [parsed];
  const events = items.filter(isEvent);
  if (events.length !== items.length)
    log.warn(
      { seq: m.seq, skipped: items.length - events.length },
      "events: skipping entries that are not events",
    );
  return events;
}

/** The history cursor that resumes after the event at `p`. */
export const formatCursor = (p: EventPosition): string => `${p.seq}:${p.index}`;

/**
 * The position a cursor resumes after. A bare `{seq}` (a cursor from before
 * batching) means after that whole message.
 */
export function parseCursor(cursor: string): { seq: number; index: number | undefined } {
  const m = /^(\d{1,15})(?::(\d{1,6}))?$/.exec(cursor);
  if (!m)
    throw invalid(`cursor ${JSON.stringify(cursor)} is not valid: pass the next_cursor of the previous page`);
  return { seq: Number(m[1]), index: m[2] === undefined ? undefined : Number(m[2]) };
}
