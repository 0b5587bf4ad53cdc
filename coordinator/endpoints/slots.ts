// Container slots of direct-served stubs: each running container takes
// `workers × concurrent_requests` requests at once; requests beyond that wait
// in a FIFO per stub (at most max_pending_tasks of them) until a slot frees
// or a container starts.

import type { StubRecord } from "../tasks/index.ts";
import type { EndpointContainer, EndpointContainers } from "./types.ts";

export interface Slot {
  containerId: string;
  agentId: string;
}

/** What a request for a slot says: take() and acquire() read the same. */
export interface SlotRequest {
  expiresAt: number | null;
  signal?: AbortSignal;
  /** First in line: a request whose container proved unreachable. */
  front?: boolean;
  avoid?: ReadonlySet<string>;
  /** This container when it has a free slot (a session kept on one container, docs/inference.md). */
  prefer?: string;
}

/** Why a wait ended without a slot. */
export class SlotWaitEnded extends Error {
  constructor(readonly why: "expired" | "aborted") {
    super(
      why === "expired" ? "no container slot freed before the request expired" : "the wait was abandoned",
    );
  }
}

interface Waiter {
  resolve: (s: Slot) => void;
  reject: (e: SlotWaitEnded) => void;
  timer: NodeJS.Timeout | undefined;
  onAbort: (() => void) | undefined;
  signal: AbortSignal | undefined;
  avoid: ReadonlySet<string> | undefined;
  prefer: string | undefined;
}

interface StubQueue {
  stub: StubRecord;
  waiting: Waiter[];
  /** Admitted (counted against max_pending_tasks) but not yet waiting: their task is being created. */
  reserved: number;
}

/** Requests one container of the stub takes at once. */
export function slotsPerContainer(stub: StubRecord): number {
  const workers = Math.max(1, Math.floor(stub.config.workers || 1));
  const concurrent = Math.max(1, Math.floor(stub.extra.concurrent_requests ?? 1));
  return workers * concurrent;
}

export class EndpointSlots {
  private readonly inFlight = new Map<string, number>();
  private readonly queues = new Map<string, StubQueue>();
  private readonly unsubscribe: () => void;

  constructor(
    private readonly containers: EndpointContainers,
    private readonly clock: () => number = Date.now,
  ) {
    this.unsubscribe = containers.onContainersChange((stubId) => this.pump(stubId));
  }

  close(): void {
    this.unsubscribe();
    for (const q of this.queues.values()) for (const w of q.waiting.splice(0)) this.end(w, "aborted");
  }

  /**
   * Counts a request against the stub's max_pending_tasks before its task is
   * made; false when it would be one too many (the caller answers 429).
   * Every admitted request then calls acquire() or unreserve() once.
   */
  admit(stub: StubRecord): boolean {
    const q = this.queueOf(stub);
    const limit =
      stub.config.max_pending_tasks > 0 ? stub.config.max_pending_tasks : Number.POSITIVE_INFINITY;
    if (q.waiting.length + q.reserved >= limit && !this.freeContainer(stub)) return false;
    q.reserved++;
    return true;
  }

  unreserve(stub: StubRecord): void {
    const q = this.queueOf(stub);
    q.reserved = Math.max(0, q.reserved - 1);
    this.dropIdle(stub.id, q);
  }

  /**
   * A slot at once, when nobody waits before this request and a running
   * container has one free; else undefined, and the caller waits in
   * acquire(). Takes the same options and does the same bookkeeping as
   * acquire() would for a slot it hands out in the same turn, without the
   * promise, the expiry timer and the abort listener a wait needs (most
   * requests never wait: this is each endpoint request's path).
   */
  take(stub: StubRecord, o: SlotRequest): Slot | undefined {
    if (o.signal?.aborted) return undefined;
    if (o.expiresAt !== null && o.expiresAt - this.clock() <= 0) return undefined;
    const q = this.queues.get(stub.id);
    if (q && q.waiting.length > 0) return undefined;
    const c = this.freeContainer(stub, o.avoid, o.prefer);
    if (!c) return undefined;
    if (q) {
      q.stub = stub;
      if (!o.front) q.reserved = Math.max(0, q.reserved - 1);
      this.dropIdle(stub.id, q);
    }
    this.inFlight.set(c.id, (this.inFlight.get(c.id) ?? 0) + 1);
    return { containerId: c.id, agentId: c.agentId };
  }

  /**
   * A slot on the least busy running container, once one is free (in FIFO
   * order, or first in line with `front`: a request whose container proved
   * unreachable). Rejects with SlotWaitEnded at `expiresAt` or on `signal`.
   */
  acquire(stub: StubRecord, o: SlotRequest): Promise<Slot> {
    const q = this.queueOf(stub);
    q.stub = stub;
    if (!o.front) q.reserved = Math.max(0, q.reserved - 1);
    return new Promise<Slot>((resolve, reject) => {
      const w: Waiter = {
        resolve,
        reject,
        timer: undefined,
        onAbort: undefined,
        signal: o.signal,
        avoid: o.avoid,
        prefer: o.prefer,
      };
      if (o.signal?.aborted) return reject(new SlotWaitEnded("aborted"));
      if (o.expiresAt !== null) {
        const ms = o.expiresAt - this.clock();
        if (ms <= 0) return reject(new SlotWaitEnded("expired"));
        w.timer = setTimeout(() => this.leave(q, w, "expired"), ms);
      }
      if (o.signal) {
        w.onAbort = () => this.leave(q, w, "aborted");
        o.signal.addEventListener("abort", w.onAbort, { once: true });
      }
      if (o.front) q.waiting.unshift(w);
      else q.waiting.push(w);
      this.pump(stub.id);
    });
  }

  /** Gives a slot back (the request ended) and hands it to the next in line. */
  release(stubId: string, slot: Slot): void {
    const n = (this.inFlight.get(slot.containerId) ?? 1) - 1;
    if (n > 0) this.inFlight.set(slot.containerId, n);
    else this.inFlight.delete(slot.containerId);
    this.pump(stubId);
  }

  /** Requests on the container now (tests, stats). */
  inFlightOn(containerId: string): number {
    return this.inFlight.get(containerId) ?? 0;
  }

  /** Requests of the stub waiting for a slot. */
  waitingFor(stubId: string): number {
    return this.queues.get(stubId)?.waiting.length ?? 0;
  }

  private pump(stubId: string): void {
    const q = this.queues.get(stubId);
    if (!q) return;
    while (q.waiting.length > 0) {
      const w = q.waiting[0] as Waiter;
      const c = this.freeContainer(q.stub, w.avoid, w.prefer);
      if (!c) break;
      q.waiting.shift();
      this.inFlight.set(c.id, (this.inFlight.get(c.id) ?? 0) + 1);
      this.detach(w);
      w.resolve({ containerId: c.id, agentId: c.agentId });
    }
    this.dropIdle(stubId, q);
  }

  /**
   * The running container with the most free slots, never one in `avoid`
   * (unreachable for this request: it waits for another, or expires).
   */
  private freeContainer(
    stub: StubRecord,
    avoid?: ReadonlySet<string>,
    prefer?: string,
  ): EndpointContainer | undefined {
    const cap = slotsPerContainer(stub);
    let best: EndpointContainer | undefined;
    let bestLoad = cap;
    for (const c of this.containers.containersOf(stub.id)) {
      if (c.state !== "running") continue;
      const load = this.inFlight.get(c.id) ?? 0;
      if (c.id === prefer && load < cap && !avoid?.has(c.id)) return c;
      if (load < bestLoad && !avoid?.has(c.id)) {
        best = c;
        bestLoad = load;
      }
    }
    return best;
  }

  private leave(q: StubQueue, w: Waiter, why: "expired" | "aborted"): void {
    const i = q.waiting.indexOf(w);
    if (i < 0) return;
    q.waiting.splice(i, 1);
    this.end(w, why);
    this.dropIdle(q.stub.id, q);
  }

  private end(w: Waiter, why: "expired" | "aborted"): void {
    this.detach(w);
    w.reject(new SlotWaitEnded(why));
  }

  private detach(w: Waiter): void {
    clearTimeout(w.timer);
    if (w.onAbort) w.signal?.removeEventListener("abort", w.onAbort);
  }

  private queueOf(stub: StubRecord): StubQueue {
    let q = this.queues.get(stub.id);
    if (!q) {
      q = { stub, waiting: [], reserved: 0 };
      this.queues.set(stub.id, q);
    }
    return q;
  }

  private dropIdle(stubId: string, q: StubQueue): void {
    if (q.waiting.length === 0 && q.reserved === 0) this.queues.delete(stubId);
  }
}
