// Signal(name) (docs/queues.md): one KV bucket, BERTH_SIGNALS, key
// `<ws>.<name>`, value {set_at, expires_at}. set is a put, so each set has a
// new revision; a container's listener asks `wait` with the revisions it
// has already handled and is answered as soon as one of its names has a
// newer, unexpired revision. Every coordinator watches the bucket, so a set
// through any coordinator wakes waiters held by any other.

import { type KV, type KvEntry, KvWatchInclude, type NatsConnection, type QueuedIterator } from "nats";
import { BerthError } from "../../shared/errors.ts";
import { streamReplicas } from "../streams/index.ts";
import { checkObjectName, checkWorkspaceId } from "./names.ts";

const BUCKET = "BERTH_SIGNALS";
/** Longest ttl a signal takes (a day); the default is beta9's 600 s. */
export const MAX_SIGNAL_TTL_S = 86_400;
export const DEFAULT_SIGNAL_TTL_S = 600;

export interface SignalState {
  name: string;
  set: boolean;
  revision: number;
  expires_at: string | null;
}

interface Waiter {
  ws: string;
  names: string[];
  seen: Record<string, number>;
  done: () => void;
}

const decode = (e: KvEntry): { set_at: number; expires_at: number } | undefined => {
  if (e.operation !== "PUT") return undefined;
  try {
    return JSON.parse(new TextDecoder().decode(e.value));
  } catch {
    return undefined;
  }
};

export class SignalStore {
  private kvP?: Promise<KV>;
  private watcher?: QueuedIterator<KvEntry>;
  private readonly waiters = new Set<Waiter>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly now: () => number = Date.now,
  ) {}

  private kv(): Promise<KV> {
    this.kvP ??= this.nc.jetstream().views.kv(BUCKET, { history: 1, replicas: streamReplicas(this.nc) });
    this.kvP.catch(() => {
      this.kvP = undefined;
    });
    return this.kvP;
  }

  /** Starts waking waiters on every set, from whichever coordinator it comes. */
  async start(): Promise<void> {
    const kv = await this.kv();
    const w = await kv.watch({ key: ">", include: KvWatchInclude.UpdatesOnly });
    this.watcher = w;
    void (async () => {
      for await (const e of w) {
        const dot = e.key.indexOf(".");
        if (dot < 0 || e.operation !== "PUT") continue;
        this.wake(e.key.slice(0, dot));
      }
    })();
  }

  stop(): void {
    this.watcher?.stop();
    for (const w of this.waiters) w.done();
    this.waiters.clear();
  }

  async set(ws: string, name: string, ttlS: number = DEFAULT_SIGNAL_TTL_S): Promise<SignalState> {
    checkWorkspaceId(ws);
    checkObjectName("signal", name);
    if (!Number.isInteger(ttlS) || ttlS < 1 || ttlS > MAX_SIGNAL_TTL_S)
      throw new BerthError(
        "invalid_request",
        `signal ${name}: ttl must be whole seconds from 1 to ${MAX_SIGNAL_TTL_S}`,
      );
    const at = this.now();
    const value = { set_at: at, expires_at: at + ttlS * 1000 };
    const revision = await (await this.kv()).put(`${ws}.${name}`, JSON.stringify(value));
    return { name, set: true, revision, expires_at: new Date(value.expires_at).toISOString() };
  }

  /** Clears the signal; false when it was not set. */
  async clear(ws: string, name: string): Promise<boolean> {
    const was = await this.state(ws, name);
    if (was.revision > 0) await (await this.kv()).purge(`${ws}.${name}`);
    return was.set;
  }

  async state(ws: string, name: string): Promise<SignalState> {
    checkWorkspaceId(ws);
    checkObjectName("signal", name);
    const e = await (await this.kv()).get(`${ws}.${name}`);
    const v = e ? decode(e) : undefined;
    if (!(e && v)) return { name, set: false, revision: 0, expires_at: null };
    const set = v.expires_at > this.now();
    return { name, set, revision: e.revision, expires_at: new Date(v.expires_at).toISOString() };
  }

  /**
   * The workspace's signals that are set now. The names come from the
   * stream's subject list (one request), not kv.keys(): its ordered consumer
   * never ended when a key was set or cleared while it ran (it waits for a
   * "0 pending" that the rewritten subject never delivers), and the list
   * request hung with it (found by the route fuzzer).
   */
  async list(ws: string): Promise<SignalState[]> {
    checkWorkspaceId(ws);
    await this.kv();
    const prefix = `$KV.${BUCKET}.${ws}.`;
    const jsm = await this.nc.jetstreamManager();
    const info = await jsm.streams.info(`KV_${BUCKET}`, { subjects_filter: `${prefix}*` });
    const out: SignalState[] = [];
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      const s = await this.state(ws, subject.slice(prefix.length));
      if (s.set) out.push(s);
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  /**
   * The names set since the revisions in `seen` (0 or absent: never seen);
   * waits up to `waitMs` for one when none is, then answers [].
   */
  async wait(
    ws: string,
    names: string[],
    seen: Record<string, number>,
    waitMs: number,
    abort?: AbortSignal,
  ): Promise<SignalState[]> {
    checkWorkspaceId(ws);
    if (!Array.isArray(names) || names.length === 0 || names.length > 100)
      throw new BerthError("invalid_request", "signal wait takes 1 to 100 names");
    for (const n of names) checkObjectName("signal", n);
    // The bell is re-armed before each read, so a set between a read and the wait still rings it.
    let ring: () => void = () => {};
    const waiter: Waiter = { ws, names, seen, done: () => ring() };
    this.waiters.add(waiter);
    const onAbort = () => ring();
    abort?.addEventListener("abort", onAbort);
    const deadline = this.now() + waitMs;
    try {
      for (;;) {
        const bell = new Promise<void>((r) => {
          ring = r;
        });
        const fired = await this.fired(ws, names, seen);
        if (fired.length > 0) return fired;
        const left = deadline - this.now();
        if (left <= 0) return [];
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([bell, new Promise<void>((r) => (timer = setTimeout(r, left)))]);
        clearTimeout(timer);
        if (!this.waiters.has(waiter) || abort?.aborted) return [];
      }
    } finally {
      abort?.removeEventListener("abort", onAbort);
      this.waiters.delete(waiter);
    }
  }

  private async fired(ws: string, names: string[], seen: Record<string, number>): Promise<SignalState[]> {
    const states = await Promise.all(names.map((n) => this.state(ws, n)));
    return states.filter((s) => s.set && s.revision > (seen[s.name] ?? 0));
  }

  private wake(ws: string): void {
    for (const w of this.waiters) if (w.ws === ws) w.done();
  }
}
