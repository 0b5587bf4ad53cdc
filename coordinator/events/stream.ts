// The workspace event stream (docs/events.md): every event is one message of
// the JetStream stream BERTH_EVENTS on `berth.events.{workspaceId}.evt.{type}`.
// The `.evt.` token keeps these apart from the scaling notices the deployment
// service publishes on core NATS at `berth.events.{workspaceId}.autoscaler`,
// which are not stored. Stream sequence numbers order the events: history
// pages by them and follow resumes after one.

import {
  AckPolicy,
  DeliverPolicy,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type NatsConnection,
  RetentionPolicy,
  StorageType,
} from "nats";
import type { Logger } from "pino";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import { type BerthEvent, EVENT_TYPES, type EventFeed, type EventSink } from "../../shared/events.ts";
import { newId } from "../../shared/ids.ts";

export const EVENTS_STREAM = "BERTH_EVENTS";
export const eventSubject = (workspaceId: string, type: string) => `berth.events.${workspaceId}.evt.${type}`;
export const workspaceEventsFilter = (workspaceId: string) => `berth.events.${workspaceId}.evt.>`;
const ALL_EVENTS = "berth.events.*.evt.>";

export const DEFAULT_EVENTS_MAX_AGE_MS = 30 * 86_400_000;
export const DEFAULT_EVENTS_MAX_BYTES = 1024 ** 3;
export const DEFAULT_HISTORY_LIMIT = 100;
export const MAX_HISTORY_LIMIT = 1000;
/** Event ids → stream sequence remembered for resuming without a scan. */
const RECENT_IDS = 10_000;

export interface EventStreamOptions {
  nats: NatsConnection;
  log: Logger;
  /** How long events are kept. @default 30 days */
  maxAgeMs?: number;
  /** How many bytes of events are kept (the oldest go first). @default 1 GiB */
  maxBytes?: number;
}

export interface HistoryQuery {
  /** ISO 8601: only events after this time. */
  after?: string;
  /** ISO 8601: only events before this time. */
  before?: string;
  /** Comma-separated patterns: exact type, `prefix.*` or `*`. */
  type?: string;
  /** @default 100, at most 1000 */
  limit?: number;
  /** next_cursor of the previous page. */
  cursor?: string;
}

export interface HistoryPage {
  events: BerthEvent[];
  /** Null on the last page. */
  next_cursor: string | null;
}

interface LiveFeed {
  stopped: boolean;
  msgs?: ConsumerMessages;
  ready: Promise<void>;
  done: Promise<void>;
}

/** A live follow; close() (or the iterator's return) ends it at once. */
export interface EventFollow extends AsyncIterable<BerthEvent> {
  close(): void;
}

/**
 * Checks `type` patterns against EVENT_TYPES (a pattern that can match
 * nothing is refused with the valid names); returns them.
 */
export function parseTypePatterns(type: string | undefined): string[] {
  if (type === undefined || type.trim() === "") return [];
  const patterns = type.split(",").map((p) => p.trim());
  for (const p of patterns) {
    const ok =
      p === "*" ||
      (EVENT_TYPES as readonly string[]).includes(p) ||
      (p.endsWith(".*") && EVENT_TYPES.some((t) => t.startsWith(p.slice(0, -1))));
    if (!ok)
      throw invalid(
        `unknown event type pattern ${JSON.stringify(p)}: use an event type, "prefix.*" or "*"; the types are ${EVENT_TYPES.join(", ")}`,
        { event_types: [...EVENT_TYPES] },
      );
  }
  return patterns;
}

/** The subject filter for one pattern (types are two tokens: `task.complete`). */
const patternFilter = (workspaceId: string, p: string) =>
  p === "*" ? workspaceEventsFilter(workspaceId) : eventSubject(workspaceId, p);

function parseTime(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const ms = Date.parse(v);
  if (Number.isNaN(ms)) throw invalid(`${name} ${JSON.stringify(v)} is not an ISO 8601 time`);
  return ms;
}

const matchesAny = (patterns: string[], type: string) =>
  patterns.some((p) => p === "*" || p === type || (p.endsWith(".*") && type.startsWith(p.slice(0, -1))));

const dec = new TextDecoder();
const enc = new TextEncoder();

export class EventStream implements EventSink, EventFeed {
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly log: Logger;
  private readonly maxAgeMs: number;
  private readonly maxBytes: number;
  private readonly subscribers = new Set<(ev: BerthEvent) => void>();
  private readonly localSubscribers = new Set<(ev: BerthEvent) => void>();
  /**
   * Only the events this coordinator published, once stored: the webhook
   * dispatcher's feed, so each event is delivered once however many
   * coordinators share the stream.
   */
  readonly localFeed: EventFeed = {
    subscribe: (fn) => {
      this.localSubscribers.add(fn);
      return () => this.localSubscribers.delete(fn);
    },
  };
  private readonly recent = new Map<string, { seq: number; workspaceId: string }>();
  private readonly inFlight = new Set<Promise<void>>();
  private live: LiveFeed | undefined;
  private failures = 0;
  private lastFailureLog = 0;

  constructor(o: EventStreamOptions) {
    this.nc = o.nats;
    this.js = o.nats.jetstream();
    this.log = o.log;
    this.maxAgeMs = o.maxAgeMs ?? DEFAULT_EVENTS_MAX_AGE_MS;
    this.maxBytes = o.maxBytes ?? DEFAULT_EVENTS_MAX_BYTES;
  }

  /** Creates the stream, or sets its retention to what the operator chose. */
  async start(): Promise<void> {
    const jsm = await this.nc.jetstreamManager();
    const limits = { subjects: [ALL_EVENTS], max_age: this.maxAgeMs * 1_000_000, max_bytes: this.maxBytes };
    try {
      await jsm.streams.info(EVENTS_STREAM);
      await jsm.streams.update(EVENTS_STREAM, limits);
    } catch (e) {
      if ((e as { code?: string }).code !== "404" && !/stream not found/i.test(describeError(e))) throw e;
      await jsm.streams.add({
        name: EVENTS_STREAM,
        ...limits,
        retention: RetentionPolicy.Limits,
        storage: StorageType.File,
        num_replicas: 1,
      });
    }
  }

  /** Ends the live feed and waits for the publishes under way. */
  async stop(): Promise<void> {
    this.subscribers.clear();
    await this.stopLive();
    await this.flush();
  }

  /** Resolves once every event published so far is stored (or failed). */
  async flush(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  // ---- EventSink ----

  publish(input: Omit<BerthEvent, "id" | "time"> & { time?: string }): void {
    const ev: BerthEvent = {
      id: newId("evt"),
      type: input.type,
      workspaceId: input.workspaceId,
      workspaceExternalId: input.workspaceExternalId,
      subject: input.subject,
      time: input.time ?? new Date().toISOString(),
      data: input.data,
    };
    let p: Promise<void>;
    try {
      // Messages of one connection are stored in the order they were sent.
      p = this.js.publish(eventSubject(ev.workspaceId, ev.type), enc.encode(JSON.stringify(ev))).then(
        (ack) => {
          this.remember(ev.id, ack.seq, ev.workspaceId);
          for (const fn of this.localSubscribers) {
            try {
              fn(ev);
            } catch (e) {
              this.log.warn({ err: describeError(e), eventId: ev.id }, "an event subscriber failed");
            }
          }
        },
        (e) => this.publishFailed(ev, e),
      );
    } catch (e) {
      this.publishFailed(ev, e);
      return;
    }
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }

  // ---- EventFeed ----

  /**
   * Every event stored from now on, published by this coordinator or any
   * other (one ordered consumer from "new" serves every subscriber here).
   */
  subscribe(fn: (ev: BerthEvent) => void): () => void {
    this.subscribers.add(fn);
    if (!this.live) this.startLive();
    return () => {
      this.subscribers.delete(fn);
      if (this.subscribers.size === 0) void this.stopLive();
    };
  }

  /** Resolves once the live feed's consumer exists (events stored after this reach subscribers). */
  async liveReady(): Promise<void> {
    await this.live?.ready;
  }

  // ---- reading ----

  /** One page of the workspace's events, oldest first. */
  async history(workspaceId: string, q: HistoryQuery = {}): Promise<HistoryPage> {
    const limit = q.limit ?? DEFAULT_HISTORY_LIMIT;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_HISTORY_LIMIT)
      throw invalid(`limit must be an integer from 1 to ${MAX_HISTORY_LIMIT}`);
    const after = parseTime("after", q.after);
    const before = parseTime("before", q.before);
    const patterns = parseTypePatterns(q.type);
    let fromSeq: number | undefined;
    if (q.cursor !== undefined) {
      if (!/^\d{1,15}$/.test(q.cursor)) throw invalid(`cursor ${JSON.stringify(q.cursor)} is not valid`);
      fromSeq = Number(q.cursor) + 1;
    }
    // One pattern is filtered by the server; several (rare) are filtered here.
    const filter =
      patterns.length === 1 ? patternFilter(workspaceId, patterns[0] as string) : workspaceEventsFilter(workspaceId);
    const events: BerthEvent[] = [];
    let lastSeq = 0;
    let more = false;
    // Stored times are never earlier than event times, so starting at `after` misses none.
    const start =
      fromSeq !== undefined
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: fromSeq }
        : after !== undefined
          ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(after).toISOString() }
          : { deliver_policy: DeliverPolicy.All };
    await this.scan(filter, start, (ev, seq, pending) => {
      const t = Date.parse(ev.time);
      if (before !== undefined && t >= before) return false;
      lastSeq = seq;
      if ((after === undefined || t > after) && (patterns.length < 2 || matchesAny(patterns, ev.type))) {
        events.push(ev);
      }
      if (events.length >= limit) {
        more = pending > 0;
        return false;
      }
      return true;
    });
    return { events, next_cursor: more ? String(lastSeq) : null };
  }

  /**
   * The workspace's events after `fromId` (an event id; unknown → invalid_request),
   * then live; without fromId, only what is stored from now on.
   */
  async follow(workspaceId: string, o: { fromId?: string } = {}): Promise<EventFollow> {
    const start = o.fromId
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: (await this.seqOf(workspaceId, o.fromId)) + 1 }
      : { deliver_policy: DeliverPolicy.New };
    const consumer = await this.js.consumers.get(EVENTS_STREAM, {
      filterSubjects: workspaceEventsFilter(workspaceId),
      ...start,
    });
    const msgs = await consumer.consume({ max_messages: 256 });
    const it = msgs[Symbol.asyncIterator]();
    const close = () => {
      void msgs.close().catch(() => {});
    };
    const iterator: AsyncIterator<BerthEvent> = {
      next: async () => {
        for (;;) {
          const r = await it.next();
          if (r.done) return { done: true, value: undefined };
          const ev = this.decode(r.value);
          if (ev) return { done: false, value: ev };
        }
      },
      return: async () => {
        close();
        return { done: true, value: undefined };
      },
    };
    return { [Symbol.asyncIterator]: () => iterator, close };
  }

  // ---- internals ----

  /** The stream sequence of the workspace's event `id`: remembered, else looked for in the stream. */
  private async seqOf(workspaceId: string, id: string): Promise<number> {
    const known = this.recent.get(id);
    if (known?.workspaceId === workspaceId) return known.seq;
    let found: number | undefined;
    if (/^evt-[0-9a-z]{1,40}$/.test(id)) {
      await this.scan(workspaceEventsFilter(workspaceId), { deliver_policy: DeliverPolicy.All }, (ev, seq) => {
        if (ev.id !== id) return true;
        found = seq;
        return false;
      });
    }
    if (found === undefined)
      throw new BerthError(
        "invalid_request",
        `unknown event id ${JSON.stringify(id)}: it is not in this workspace's event history (it may have aged out)`,
      );
    return found;
  }

  /**
   * Reads stored messages matching `filter` in order through a short-lived
   * consumer until `visit` returns false or none are left. `pending` is how
   * many more match after this one.
   */
  private async scan(
    filter: string,
    start: { deliver_policy: DeliverPolicy; opt_start_seq?: number; opt_start_time?: string },
    visit: (ev: BerthEvent, seq: number, pending: number) => boolean,
  ): Promise<void> {
    const jsm: JetStreamManager = await this.nc.jetstreamManager();
    const info = await jsm.consumers.add(EVENTS_STREAM, {
      filter_subject: filter,
      ack_policy: AckPolicy.None,
      mem_storage: true,
      inactive_threshold: 30_000_000_000,
      ...start,
    });
    try {
      let pending = info.num_pending;
      const consumer = await this.js.consumers.get(EVENTS_STREAM, info.config.name ?? info.name);
      while (pending > 0) {
        // Only as many as are stored, so the fetch ends as soon as they came.
        const batch = await consumer.fetch({ max_messages: Math.min(pending, 256), expires: 5000 });
        let got = 0;
        let stop = false;
        for await (const m of batch) {
          got++;
          pending = m.info.pending;
          const ev = this.decode(m);
          // Leaving the loop ends the fetch (closing it from inside would wait on this loop).
          if (ev && !visit(ev, m.seq, pending)) {
            stop = true;
            break;
          }
        }
        if (stop || got === 0) return; // got 0: they aged out meanwhile
      }
    } finally {
      await jsm.consumers.delete(EVENTS_STREAM, info.name).catch(() => {});
    }
  }

  private decode(m: JsMsg): BerthEvent | undefined {
    try {
      const ev = JSON.parse(dec.decode(m.data)) as BerthEvent;
      this.remember(ev.id, m.seq, ev.workspaceId);
      return ev;
    } catch (e) {
      this.log.warn({ seq: m.seq, err: describeError(e) }, "events: skipping a message that is not an event");
      return undefined;
    }
  }

  private remember(id: string, seq: number, workspaceId: string): void {
    if (this.recent.has(id)) return;
    this.recent.set(id, { seq, workspaceId });
    if (this.recent.size > RECENT_IDS) this.recent.delete(this.recent.keys().next().value as string);
  }

  // Logged at most once a second, with how many failed since: a NATS outage must not flood the log.
  private publishFailed(ev: BerthEvent, e: unknown): void {
    this.failures++;
    const now = Date.now();
    if (now - this.lastFailureLog < 1000) return;
    this.lastFailureLog = now;
    this.log.warn(
      { type: ev.type, eventId: ev.id, failed: this.failures, err: describeError(e) },
      "events: cannot store events; they are lost",
    );
    this.failures = 0;
  }

  private startLive(): void {
    let ready!: () => void;
    const live: LiveFeed = {
      stopped: false,
      ready: new Promise<void>((r) => {
        ready = r;
      }),
      done: Promise.resolve(),
    };
    live.done = (async () => {
      try {
        const c = await this.js.consumers.get(EVENTS_STREAM, {
          filterSubjects: ALL_EVENTS,
          deliver_policy: DeliverPolicy.New,
        });
        // consume() returns once the consumer exists: what is stored after that comes here.
        const msgs = await c.consume({ max_messages: 512 });
        live.msgs = msgs;
        ready();
        if (live.stopped) return void (await msgs.close().catch(() => {}));
        for await (const m of msgs) {
          const ev = this.decode(m);
          if (!ev) continue;
          for (const fn of [...this.subscribers]) {
            try {
              fn(ev);
            } catch (e) {
              this.log.warn({ err: describeError(e), eventId: ev.id }, "events: a subscriber failed");
            }
          }
        }
      } catch (e) {
        if (!live.stopped) this.log.warn({ err: describeError(e) }, "events: the live feed stopped");
      } finally {
        ready();
      }
    })();
    this.live = live;
  }

  private async stopLive(): Promise<void> {
    const live = this.live;
    if (!live) return;
    this.live = undefined;
    live.stopped = true;
    await live.ready;
    await live.msgs?.close().catch(() => {});
    await live.done;
  }
}
