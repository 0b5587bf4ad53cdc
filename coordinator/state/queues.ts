// Queue(name) on JetStream (docs/queues.md): one stream per workspace,
// BERTH_QUEUE_<ws>, one subject per queue. put is a JetStream publish (the
// item is on disk when it is acknowledged); pop takes the queue's first
// message by subject and deletes it by sequence. JetStream deletes a
// sequence once, so of many concurrent poppers exactly one wins each item;
// the losers move on to the next. An item leaves the stream only through
// that delete, so a popper that dies before deleting loses nothing.

import type { JetStreamClient, JetStreamManager, NatsConnection, StreamConfig } from "nats";
import { DiscardPolicy, RetentionPolicy, StorageType } from "nats";
import { BerthError } from "../../shared/errors.ts";
import { streamReplicas } from "../streams/index.ts";
import { checkObjectName, checkWorkspaceId, isJsNotFound, jsErrorText } from "./names.ts";

export interface QueueLimits {
  /** Largest item, pickled (bytes). */
  maxItemBytes: number;
  /** All of a workspace's queues together (bytes). */
  maxWorkspaceBytes: number;
}

export const DEFAULT_QUEUE_LIMITS: QueueLimits = { maxItemBytes: 1024 * 1024, maxWorkspaceBytes: 1024 ** 3 };

export interface QueueStoreOptions {
  nc: NatsConnection;
  limits?: Partial<QueueLimits>;
  /** The workspace's queue item quota (limits route, max_queue_items); null: none. */
  maxItems?: (workspaceId: string) => Promise<number | null>;
}

export interface QueueInfo {
  name: string;
  size: number;
}

const streamName = (ws: string) => `BERTH_QUEUE_${ws}`;
const subjectOf = (ws: string, name: string) => `berth.queue.${ws}.${name}`;

export class QueueStore {
  readonly limits: QueueLimits;
  private jsm?: JetStreamManager;
  private js?: JetStreamClient;
  /** Workspaces whose stream this process has made sure of. */
  private readonly ready = new Map<string, Promise<void>>();
  /** Workspaces whose item quota was lowered below their stream's limit: checked before each put. */
  private readonly soft = new Map<string, number>();

  constructor(private readonly o: QueueStoreOptions) {
    this.limits = { ...DEFAULT_QUEUE_LIMITS, ...o.limits };
  }

  private async manager(): Promise<JetStreamManager> {
    this.jsm ??= await this.o.nc.jetstreamManager();
    return this.jsm;
  }

  private client(): JetStreamClient {
    this.js ??= this.o.nc.jetstream();
    return this.js;
  }

  private config(ws: string, maxItems: number | null): Partial<StreamConfig> {
    return {
      subjects: [`berth.queue.${ws}.*`],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_msgs: maxItems ?? -1,
      max_bytes: this.limits.maxWorkspaceBytes,
      // JetStream counts the subject and headers too; the item itself is checked in put.
      max_msg_size: this.limits.maxItemBytes + 4096,
    };
  }

  /**
   * Creates the workspace's stream, or raises its limits to the current
   * ones. Limits are never lowered on the stream: JetStream drops the oldest
   * messages of a stream whose limit goes below what it holds, whatever the
   * discard policy. A lowered item quota is checked in put instead (`soft`).
   */
  private ensure(ws: string): Promise<void> {
    let p = this.ready.get(ws);
    if (!p) {
      p = (async () => {
        const jsm = await this.manager();
        const maxItems = (await this.o.maxItems?.(ws)) ?? null;
        const want = this.config(ws, maxItems);
        let have: StreamConfig;
        try {
          have = (await jsm.streams.info(streamName(ws))).config;
        } catch (e) {
          if (!isJsNotFound(e)) throw e;
          await jsm.streams.add({ name: streamName(ws), ...want, num_replicas: streamReplicas(this.o.nc) });
          this.soft.delete(ws);
          return;
        }
        // -1 is no limit: the larger of two limits.
        const larger = (a: number, b: number) => (a < 0 || b < 0 ? -1 : Math.max(a, b));
        const msgs = larger(have.max_msgs, want.max_msgs as number);
        const bytes = larger(have.max_bytes, want.max_bytes as number);
        if (msgs !== have.max_msgs || bytes !== have.max_bytes || have.max_msg_size !== want.max_msg_size)
          await jsm.streams.update(streamName(ws), { ...want, max_msgs: msgs, max_bytes: bytes });
        if (maxItems !== null && (msgs < 0 || msgs > maxItems)) this.soft.set(ws, maxItems);
        else this.soft.delete(ws);
      })();
      this.ready.set(ws, p);
      p.catch(() => this.ready.delete(ws));
    }
    return p;
  }

  /** After the workspace's limits changed: a raised quota goes to the stream, a lowered one is checked in put. */
  async limitsChanged(ws: string): Promise<void> {
    this.ready.delete(ws);
    if (await this.exists(ws)) await this.ensure(ws);
  }

  private async exists(ws: string): Promise<boolean> {
    try {
      await (await this.manager()).streams.info(streamName(ws));
      return true;
    } catch (e) {
      if (isJsNotFound(e)) return false;
      throw e;
    }
  }

  private full(name: string, max: number | null | undefined): BerthError {
    return new BerthError(
      "limit_exceeded",
      `queue ${name}: the workspace's queues hold their limit of ${max ?? "?"} items (max_queue_items); pop some first`,
    );
  }

  async put(ws: string, name: string, item: Uint8Array): Promise<void> {
    checkWorkspaceId(ws);
    checkObjectName("queue", name);
    if (item.length > this.limits.maxItemBytes)
      throw new BerthError(
        "resource_exhausted",
        `queue ${name}: an item of ${item.length} bytes is over the ${this.limits.maxItemBytes}-byte item limit`,
      );
    await this.ensure(ws);
    const soft = this.soft.get(ws);
    // Concurrent puts may pass this check together: a lowered quota is kept to within them.
    if (soft !== undefined && (await this.items(ws)) >= soft) throw this.full(name, soft);
    try {
      await this.client().publish(subjectOf(ws, name), item, { expect: { streamName: streamName(ws) } });
    } catch (e) {
      const t = jsErrorText(e);
      if (t.includes("maximum messages")) throw this.full(name, await this.o.maxItems?.(ws));
      if (t.includes("maximum bytes"))
        throw new BerthError(
          "limit_exceeded",
          `queue ${name}: the workspace's queues hold their limit of ${this.limits.maxWorkspaceBytes} bytes; pop some first`,
        );
      if (t.includes("message size"))
        throw new BerthError(
          "resource_exhausted",
          `queue ${name}: the item is over the ${this.limits.maxItemBytes}-byte item limit`,
        );
      throw e;
    }
  }

  /** The first item, removed; undefined when the queue is empty. */
  async pop(ws: string, name: string): Promise<Uint8Array | undefined> {
    checkWorkspaceId(ws);
    checkObjectName("queue", name);
    const jsm = await this.manager();
    const subject = subjectOf(ws, name);
    let from = 1;
    for (;;) {
      let seq: number;
      let data: Uint8Array;
      try {
        // The stream leader's MSG.GET (not a direct get, which a lagging replica may answer) takes next_by_subj too.
        const next = { next_by_subj: subject, seq: from } as unknown as { seq: number };
        const m = await jsm.streams.getMessage(streamName(ws), next);
        seq = m.seq;
        data = m.data;
      } catch (e) {
        if (isJsNotFound(e)) return undefined;
        throw e;
      }
      try {
        if (await jsm.streams.deleteMessage(streamName(ws), seq, false)) return data;
      } catch (e) {
        if (!isJsNotFound(e)) throw e;
      }
      // Another popper deleted it first: the next one.
      from = seq + 1;
    }
  }

  async size(ws: string, name: string): Promise<number> {
    checkWorkspaceId(ws);
    checkObjectName("queue", name);
    return (await this.counts(ws, subjectOf(ws, name))).get(name) ?? 0;
  }

  /** Non-empty queues of the workspace with their item counts (a queue exists while it holds items). */
  async list(ws: string): Promise<QueueInfo[]> {
    checkWorkspaceId(ws);
    const counts = await this.counts(ws, `berth.queue.${ws}.*`);
    return [...counts].map(([name, size]) => ({ name, size })).sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Items in all of the workspace's queues (the limits route's usage). */
  async items(ws: string): Promise<number> {
    try {
      return (await (await this.manager()).streams.info(streamName(checkWorkspaceId(ws)))).state.messages;
    } catch (e) {
      if (isJsNotFound(e)) return 0;
      throw e;
    }
  }

  /** Empties the queue; not_found when it holds nothing. */
  async delete(ws: string, name: string): Promise<number> {
    checkObjectName("queue", name);
    if ((await this.size(ws, name)) === 0) throw new BerthError("not_found", `queue ${name} not found`);
    const r = await (await this.manager()).streams.purge(streamName(ws), { filter: subjectOf(ws, name) });
    return r.purged;
  }

  private async counts(ws: string, filter: string): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    let info: Awaited<ReturnType<JetStreamManager["streams"]["info"]>>;
    try {
      info = await (await this.manager()).streams.info(streamName(ws), { subjects_filter: filter });
    } catch (e) {
      if (isJsNotFound(e)) return out;
      throw e;
    }
    const prefix = `berth.queue.${ws}.`;
    for (const [subject, n] of Object.entries(info.state.subjects ?? {}))
      if (subject.startsWith(prefix) && n > 0) out.set(subject.slice(prefix.length), n);
    return out;
  }
}
