// The workspace event stream (docs/events.md): the events a workspace emits
// within one short window (batchWindowMs) are one message of the JetStream
// stream BERTH_EVENTS on `berth.events.{workspaceId}.evt.batch` (batch.ts).
// The `.evt.` token keeps these apart from the scaling notices the deployment
// service publishes on core NATS at `berth.events.{workspaceId}.autoscaler`,
// which are not stored. Stream sequence numbers, then the index inside a
// message, order the events: history pages by them and follow resumes after one.

import {
  DeliverPolicy,
  type ConsumerMessages,
  type JetStreamClient,
  type NatsConnection,
  RetentionPolicy,
  StorageType,
} from "nats";
import type { Logger } from "pino";
import { streamReplicas } from "../streams/index.ts";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import type { BerthEvent, EventFeed, EventSink } from "./types.ts";
import { newId } from "../../shared/ids.ts";
import {
  type EventPosition,
  MAX_BATCH_BYTES,
  batchBody,
  decodeBatch,
  formatCursor,
  parseCursor,
} from "./batch.ts";
import { type ScanStart, scanStored } from "../streams/index.ts";
import { matchesAny, parseTime, parseTypePatterns } from "./filters.ts";

export { parseTypePatterns };

export const EVENTS_STREAM = "BERTH_EVENTS";
/** Where a workspace's batches of events are stored. */
export const eventBatchSubject = (workspaceId: string) => `berth.events.${workspaceId}.evt.batch`;
export const workspaceEventsFilter = (workspaceId: string) => `berth.events.${workspaceId}.evt.>`;
const ALL_EVENTS = "berth.events.*.evt.>";

export const DEFAULT_EVENTS_MAX_AGE_MS = 30 * 86_400_000;
export const DEFAULT_EVENTS_MAX_BYTES = 1024 ** 3;
export const DEFAULT_EVENTS_BATCH_WINDOW_MS = 2;
export const DEFAULT_HISTORY_LIMIT = 100;
export const MAX_HISTORY_LIMIT = 1000;
/** Event ids → stored position remembered for resuming without a scan. */
const RECENT_IDS = 10_000;

export interface EventStreamOptions {
  nats: NatsConnection;
  log: Logger;
  /** How long events are kept. @default 30 days */
  maxAgeMs?: number;
  /** How many bytes of events are kept (the oldest go first). @default 1 GiB */
  maxBytes?: number;
  /**
   * How long a workspace's events gather before they are stored as one
   * message; 0 stores what one event-loop turn emitted. Followers and
   * webhooks see an event at most this much later. @default 2
   */
  batchWindowMs?: number;
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
  /** next_cursor of the previous page (`{seq}:{index}`). */
  cursor?: string;
}

export interface HistoryPage {
  events: BerthEvent[];
  /** Null on the last page. */
  next_cursor: string | null;
}

/** What was published since start: stored events, the messages they took, and events lost. */
export interface EventStreamStats {
  stored: number;
  messages: number;
  lost: number;
}

interface LiveFeed {
  stopped: boolean;
  msgs?: ConsumerMessages;
  ready: Promise<void>;
  done: Promise<void>;
}

/** Events of one workspace waiting for their batch to be stored. */
interface Gathering {
  events: BerthEvent[];
  json: string[];
  bytes: number;
  timer: NodeJS.Timeout | NodeJS.Immediate;
}

/** A live follow; close() (or the iterator's return) ends it at once. */
export interface EventFollow extends AsyncIterable<BerthEvent> {
  close(): void;
}

const enc = new TextEncoder();

export class EventStream implements EventSink, EventFeed {
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly log: Logger;
  private readonly maxAgeMs: number;
  private readonly maxBytes: number;
  private readonly batchWindowMs: number;
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
  private readonly recent = new Map<string, EventPosition & { workspaceId: string }>();
  private readonly gathering = new Map<string, Gathering>();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly counts: EventStreamStats = { stored: 0, messages: 0, lost: 0 };
  private live: LiveFeed | undefined;
  private failures = 0;
  private lastFailureLog = 0;

  constructor(o: EventStreamOptions) {
    this.nc = o.nats;
    this.js = o.nats.jetstream();
    this.log = o.log;
    this.maxAgeMs = o.maxAgeMs ?? DEFAULT_EVENTS_MAX_AGE_MS;
    this.maxBytes = o.maxBytes ?? DEFAULT_EVENTS_MAX_BYTES;
    this.batchWindowMs = o.batchWindowMs ?? DEFAULT_EVENTS_BATCH_WINDOW_MS;
    if (!Number.isFinite(this.batchWindowMs) || this.batchWindowMs < 0 || this.batchWindowMs > 1000)
      throw new Error(`events: batchWindowMs must be from 0 to 1000 ms, got ${o.batchWindowMs}`);
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
        num_replicas: streamReplicas(this.nc),
      });
    }
  }

  /** Ends the live feed and stores (or fails) every event published so far. */
  async stop(): Promise<void> {
    this.subscribers.clear();
    await this.stopLive();
    await this.flush();
  }

  /** Stores the gathered events now; resolves once every event published so far is stored (or failed). */
  async flush(): Promise<void> {
    while (this.gathering.size > 0 || this.inFlight.size > 0) {
      for (const workspaceId of [...this.gathering.keys()]) this.send(workspaceId);
      await Promise.allSettled([...this.inFlight]);
    }
  }

  /** Counters since this stream was made (events stored, messages they took, events lost). */
  stats(): EventStreamStats {
    return { ...this.counts };
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
    let json: string;
    try {
      json = JSON.stringify(ev);
    } catch (e) {
      this.publishFailed([ev], e);
      return;
    }
    let g = this.gathering.get(ev.workspaceId);
    if (g && g.bytes + json.length > MAX_BATCH_BYTES) {
      this.send(ev.workspaceId);
      g = undefined;
    }
    if (!g) {
      const send = () => this.send(ev.workspaceId);
      g = {
        events: [],
        json: [],
        bytes: 2,
        timer: this.batchWindowMs === 0 ? setImmediate(send) : setTimeout(send, this.batchWindowMs),
      };
      this.gathering.set(ev.workspaceId, g);
    }
    g.events.push(ev);
    g.json.push(json);
    g.bytes += json.length + 1;
  }

  /** Stores the workspace's gathered events as one message. */
  private send(workspaceId: string): void {
    const g = this.gathering.get(workspaceId);
    if (!g) return;
    this.gathering.delete(workspaceId);
    clearTimeout(g.timer as NodeJS.Timeout);
    clearImmediate(g.timer as NodeJS.Immediate);
    const { events } = g;
    let p: Promise<void>;
    try {
      // Messages of one connection are stored in the order they were sent, so a workspace's batches stay in order.
      p = this.js.publish(eventBatchSubject(workspaceId), enc.encode(batchBody(g.json))).then(
        (ack) => {
          this.counts.stored += events.length;
          this.counts.messages++;
          for (const [index, ev] of events.entries())
            this.remember(ev.id, { seq: ack.seq, index }, workspaceId);
          for (const ev of events) {
            for (const fn of this.localSubscribers) {
              try {
                fn(ev);
              } catch (e) {
                this.log.warn({ err: describeError(e), eventId: ev.id }, "an event subscriber failed");
              }
            }
          }
        },
        (e) => this.publishFailed(events, e),
      );
    } catch (e) {
      this.publishFailed(events, e);
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
    // Events at or before `resume` were on earlier pages.
    const resume = q.cursor === undefined ? undefined : parseCursor(q.cursor);
    const events: BerthEvent[] = [];
    let last: EventPosition | undefined;
    let more = false;
    // Stored times are never earlier than event times, so starting at `after` misses none.
    const start =
      resume !== undefined
        ? {
            deliver_policy: DeliverPolicy.StartSequence,
            opt_start_seq: resume.index === undefined ? resume.seq + 1 : resume.seq,
          }
        : after !== undefined
          ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(after).toISOString() }
          : { deliver_policy: DeliverPolicy.All };
    // Batches mix types, so types are filtered here, not by the server.
    await this.scan(workspaceEventsFilter(workspaceId), start, (batch, seq) => {
      for (let index = 0; index < batch.length; index++) {
        if (resume?.index !== undefined && seq === resume.seq && index <= resume.index) continue;
        const ev = batch[index] as BerthEvent;
        if (before !== undefined && Date.parse(ev.time) >= before) return false;
        if (events.length >= limit) {
          more = true;
          return false;
        }
        last = { seq, index };
        if ((after === undefined || Date.parse(ev.time) > after) && matchesAny(patterns, ev.type))
          events.push(ev);
      }
      return true;
    });
    return { events, next_cursor: more && last ? formatCursor(last) : null };
  }

  /**
   * The workspace's events after `fromId` (an event id; unknown → invalid_request),
   * then live; without fromId, only what is stored from now on.
   */
  async follow(workspaceId: string, o: { fromId?: string } = {}): Promise<EventFollow> {
    const from = o.fromId ? await this.positionOf(workspaceId, o.fromId) : undefined;
    // The message holding fromId is read again: the events after it in that batch come first.
    const start = from
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from.seq }
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
    const ready: BerthEvent[] = [];
    const iterator: AsyncIterator<BerthEvent> = {
      next: async () => {
        while (ready.length === 0) {
          const r = await it.next();
          if (r.done) return { done: true, value: undefined };
          const batch = this.decode(r.value);
          ready.push(...(from && r.value.seq === from.seq ? batch.slice(from.index + 1) : batch));
        }
        return { done: false, value: ready.shift() as BerthEvent };
      },
      return: async () => {
        close();
        return { done: true, value: undefined };
      },
    };
    return { [Symbol.asyncIterator]: () => iterator, close };
  }

  // ---- internals ----

  /** Where the workspace's event `id` is stored: remembered, else looked for in the stream. */
  private async positionOf(workspaceId: string, id: string): Promise<EventPosition> {
    const known = this.recent.get(id);
    if (known?.workspaceId === workspaceId) return { seq: known.seq, index: known.index };
    let found: EventPosition | undefined;
    if (/^evt-[0-9a-z]{1,40}$/.test(id)) {
      await this.scan(
        workspaceEventsFilter(workspaceId),
        { deliver_policy: DeliverPolicy.All },
        (batch, seq) => {
          const index = batch.findIndex((ev) => ev.id === id);
          if (index < 0) return true;
          found = { seq, index };
          return false;
        },
      );
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
   * many more messages match after this one.
   */
  private async scan(
    filter: string,
    start: ScanStart,
    visit: (batch: BerthEvent[], seq: number, pending: number) => boolean,
  ): Promise<void> {
    const nats = { nc: this.nc, js: this.js };
    await scanStored(nats, EVENTS_STREAM, filter, start, (m, pending) =>
      visit(this.decode(m), m.seq, pending),
    );
  }

  private decode(m: { data: Uint8Array; seq: number }): BerthEvent[] {
    const batch = decodeBatch(m, this.log);
    for (const [index, ev] of batch.entries()) this.remember(ev.id, { seq: m.seq, index }, ev.workspaceId);
    return batch;
  }

  private remember(id: string, p: EventPosition, workspaceId: string): void {
    if (this.recent.has(id)) return;
    this.recent.set(id, { ...p, workspaceId });
    if (this.recent.size > RECENT_IDS) this.recent.delete(this.recent.keys().next().value as string);
  }

  // Counted always; logged at most once a second, with how many failed since: a NATS outage must not flood the log.
  private publishFailed(events: BerthEvent[], e: unknown): void {
    this.failures += events.length;
    this.counts.lost += events.length;
    const now = Date.now();
    if (now - this.lastFailureLog < 1000) return;
    this.lastFailureLog = now;
    const first = events[0];
    this.log.warn(
      { type: first?.type, eventId: first?.id, failed: this.failures, err: describeError(e) },
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
          for (const ev of this.decode(m)) {
            for (const fn of [...this.subscribers]) {
              try {
                fn(ev);
              } catch (e) {
                this.log.warn({ err: describeError(e), eventId: ev.id }, "events: a subscriber failed");
              }
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
