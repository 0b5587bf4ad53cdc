// Delivers workspace events to webhooks (spec, Events: Webhook deliveries):
// one signed CloudEvent POST per matching enabled webhook, 10 s timeout, no
// retry. Deliveries run beside the publisher, never in its way: a bounded
// number in flight, a bounded queue behind them, and beyond that a dropped
// delivery with a warning (consumers recover through the events history).

import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import {
  type BerthEvent,
  CLOUDEVENTS_CONTENT_TYPE,
  type EventFeed,
  eventTypeMatches,
  toCloudEvent,
} from "../events/index.ts";
import type { SecretKey } from "../secrets/index.ts";
import type { WebhookDeliveryRecord, WebhookRepo } from "./store.ts";
import { openSigningSecret, signBody } from "./validate.ts";

export const DELIVERY_TIMEOUT_MS = 10_000;
export const MAX_IN_FLIGHT = 32;
export const MAX_QUEUED = 1000;
/** Other coordinators' changes show within this plus a reload: inside the spec's 15 s. */
export const RELOAD_INTERVAL_MS = 10_000;
/** Attempts kept per webhook. */
export const DELIVERIES_KEPT = 100;

/** An enabled webhook as the dispatcher holds it: with its opened secret. */
export interface WebhookTarget {
  id: string;
  workspaceId: string;
  url: string;
  eventTypes: string[];
  secret: string;
}

export type DeliveryOutcome = WebhookDeliveryRecord;

export interface WebhookDispatcherOptions {
  repo: WebhookRepo;
  key: SecretKey;
  log: Logger;
  /** @default DELIVERY_TIMEOUT_MS */
  timeoutMs?: number;
  /** @default MAX_IN_FLIGHT */
  maxInFlight?: number;
  /** @default MAX_QUEUED */
  maxQueued?: number;
  /** @default RELOAD_INTERVAL_MS */
  reloadIntervalMs?: number;
  /** @default DELIVERIES_KEPT */
  keepDeliveries?: number;
  /** @default () => new Date() */
  now?: () => Date;
}

export class WebhookDispatcher {
  private readonly o: Required<Omit<WebhookDispatcherOptions, "repo" | "key" | "log">>;
  private byWorkspace = new Map<string, WebhookTarget[]>();
  private readonly queue: { target: WebhookTarget; ev: BerthEvent }[] = [];
  private inFlight = 0;
  private readonly idleWaiters: (() => void)[] = [];
  private reloadSeq = 0;
  private appliedSeq = 0;
  private unsubscribe: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: WebhookDispatcherOptions) {
    this.o = {
      timeoutMs: deps.timeoutMs ?? DELIVERY_TIMEOUT_MS,
      maxInFlight: deps.maxInFlight ?? MAX_IN_FLIGHT,
      maxQueued: deps.maxQueued ?? MAX_QUEUED,
      reloadIntervalMs: deps.reloadIntervalMs ?? RELOAD_INTERVAL_MS,
      keepDeliveries: deps.keepDeliveries ?? DELIVERIES_KEPT,
      now: deps.now ?? (() => new Date()),
    };
  }

  /** Loads the subscriptions, then follows `feed` and reloads on an interval (other coordinators' changes). */
  async start(feed: EventFeed): Promise<void> {
    await this.reload();
    this.unsubscribe = feed.subscribe((ev) => this.onEvent(ev));
    this.timer = setInterval(() => {
      this.reload().catch((e) =>
        this.deps.log.warn({ err: describeError(e) }, "webhooks: reloading subscriptions failed"),
      );
    }, this.o.reloadIntervalMs);
    this.timer.unref();
  }

  /** Stops following the feed; deliveries under way finish (each within the timeout). */
  async stop(): Promise<void> {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
    await this.idle();
  }

  /**
   * Re-reads every enabled subscription. The service calls it after each
   * change, so changes made here apply at once; of overlapping reloads, only
   * the latest started is kept.
   */
  async reload(): Promise<void> {
    const seq = ++this.reloadSeq;
    const rows = await this.deps.repo.listEnabledWithSecrets();
    if (seq < this.appliedSeq) return;
    this.appliedSeq = seq;
    const next = new Map<string, WebhookTarget[]>();
    for (const w of rows) {
      const secret = openSigningSecret(this.deps.key, w);
      if (secret === undefined) {
        this.deps.log.warn(
          { webhook: w.id, keyId: w.sealedSecret.keyId },
          "webhooks: this coordinator's secrets key cannot open the signing secret; not delivering to it",
        );
        continue;
      }
      const list = next.get(w.workspaceId) ?? [];
      list.push({ id: w.id, workspaceId: w.workspaceId, url: w.url, eventTypes: w.eventTypes, secret });
      next.set(w.workspaceId, list);
    }
    this.byWorkspace = next;
  }

  /** Resolves when nothing is queued or in flight. */
  idle(): Promise<void> {
    if (this.inFlight === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Queues the event for every matching enabled webhook of its workspace; returns at once. */
  onEvent(ev: BerthEvent): void {
    // A test event is addressed to one webhook (WebhookService.test), never fanned out.
    if (ev.type === "webhook.test") return;
    for (const target of this.byWorkspace.get(ev.workspaceId) ?? []) {
      if (!eventTypeMatches(target.eventTypes, ev.type)) continue;
      if (this.inFlight < this.o.maxInFlight) {
        this.run(target, ev);
      } else if (this.queue.length < this.o.maxQueued) {
        this.queue.push({ target, ev });
      } else {
        this.deps.log.warn(
          { webhook: target.id, event: ev.id, type: ev.type, queued: this.queue.length },
          "webhooks: delivery queue full; dropping this delivery",
        );
      }
    }
  }

  /** One delivery now, outside the queue (the test route); recorded like any other. */
  deliver(target: WebhookTarget, ev: BerthEvent): Promise<DeliveryOutcome> {
    return this.attempt(target, ev);
  }

  private run(target: WebhookTarget, ev: BerthEvent): void {
    this.inFlight++;
    void this.attempt(target, ev).finally(() => {
      this.inFlight--;
      const next = this.queue.shift();
      if (next) this.run(next.target, next.ev);
      else if (this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w();
    });
  }

  /** POSTs the event and records the outcome; never throws. */
  private async attempt(target: WebhookTarget, ev: BerthEvent): Promise<DeliveryOutcome> {
    const body = JSON.stringify(toCloudEvent(ev));
    const attemptedAt = this.o.now();
    const started = performance.now();
    let statusCode: number | null = null;
    let error: string | null = null;
    try {
      const res = await fetch(target.url, {
        method: "POST",
        body,
        headers: {
          "content-type": CLOUDEVENTS_CONTENT_TYPE,
          "x-service-signature": signBody(target.secret, body),
          "x-service-event": ev.type,
          "x-service-delivery": ev.id,
          "user-agent": "berth-webhooks",
        },
        // A redirect could lead to the coordinator itself, which the URL check refused.
        redirect: "manual",
        signal: AbortSignal.timeout(this.o.timeoutMs),
      });
      statusCode = res.status;
      await res.body?.cancel().catch(() => {});
    } catch (e) {
      error = deliveryError(e, this.o.timeoutMs);
    }
    const outcome: DeliveryOutcome = {
      id: `whd-${randomUUID()}`,
      webhookId: target.id,
      eventId: ev.id,
      eventType: ev.type,
      statusCode,
      error,
      durationMs: Math.round(performance.now() - started),
      attemptedAt: attemptedAt.toISOString(),
    };
    if (error !== null || (statusCode !== null && (statusCode < 200 || statusCode > 299))) {
      this.deps.log.info(
        { webhook: target.id, event: ev.id, status: statusCode, error },
        "webhooks: delivery not accepted",
      );
    }
    try {
      await this.deps.repo.recordDelivery(outcome, this.o.keepDeliveries);
    } catch (e) {
      this.deps.log.warn(
        { webhook: target.id, err: describeError(e) },
        "webhooks: recording a delivery failed",
      );
    }
    return outcome;
  }
}

function deliveryError(e: unknown, timeoutMs: number): string {
  if (e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError")) {
    return `no response within ${timeoutMs} ms`;
  }
  // fetch wraps the socket error (ECONNREFUSED, ENOTFOUND, ...) as its cause.
  const cause = e instanceof Error ? (e as { cause?: unknown }).cause : undefined;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return code ? `${code}: ${cause.message}` : cause.message;
  }
  return describeError(e);
}
