import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import pino from "pino";
import { type SecretKey, secretKeyFromBytes } from "../../coordinator/secrets/index.ts";
import type { Store } from "../../coordinator/records.ts";
import { WebhookDispatcher, WebhookService, selfUrlMatcher } from "../../coordinator/webhooks/index.ts";
import type { BerthEvent, EventFeed, EventType } from "../../coordinator/events/types.ts";
import { newId } from "../../shared/ids.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";

type Hooks = { after: (fn: () => unknown) => void };

export const ENGINES = STORE_ENGINES;

export const randomKey = (): SecretKey => secretKeyFromBytes(randomBytes(32), "test key");

/** The coordinator the tests pretend to be: its port, for the self-URL check. */
export const COORDINATOR_PORT = 7431;
export const COORDINATOR_PUBLIC_URL = "https://berth.example.com";

/** A live event feed in memory: publish hands the event to every subscriber. */
export class MemoryFeed implements EventFeed {
  private readonly subscribers = new Set<(ev: BerthEvent) => void>();
  subscribe(fn: (ev: BerthEvent) => void): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }
  publish(ev: BerthEvent): void {
    for (const fn of this.subscribers) fn(ev);
  }
  get size(): number {
    return this.subscribers.size;
  }
}

export function event(
  workspace: { id: string; externalId: string },
  type: EventType,
  subject = "task-1",
): BerthEvent {
  return {
    id: newId("evt"),
    type,
    workspaceId: workspace.id,
    workspaceExternalId: workspace.externalId,
    subject,
    time: new Date().toISOString(),
    data: { subject, type },
  };
}

export interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * A real HTTP consumer on 127.0.0.1. `/hang...` never answers; `/status/N`
 * answers N; anything else 204. Every request is recorded and announced.
 */
export async function startReceiver(hooks: Hooks) {
  const got: Received[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.push({ path: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      for (const w of waiters.filter((w) => got.length >= w.n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
      if (req.url?.startsWith("/hang")) return;
      const m = /^\/status\/(\d{3})/.exec(req.url ?? "");
      res.writeHead(m ? Number(m[1]) : 204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  hooks.after(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    got,
    url: (path: string) => `${base}${path}`,
    /** Resolves once `n` requests in all have arrived. */
    waitFor: (n: number) =>
      got.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve })),
  };
}

/** A dispatcher and service over `store`, with a short delivery timeout for tests. */
export function webhookSystem(
  store: Store,
  o: { timeoutMs?: number; maxInFlight?: number; maxQueued?: number } = {},
) {
  const key = randomKey();
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: "debug" }, { write: (l: string) => void lines.push(JSON.parse(l)) });
  const dispatcher = new WebhookDispatcher({ repo: store.webhooks, key, log, ...o });
  const service = new WebhookService({
    store,
    key,
    dispatcher,
    isSelf: selfUrlMatcher({ publicUrl: COORDINATOR_PUBLIC_URL, port: COORDINATOR_PORT }),
  });
  return { key, dispatcher, service, lines };
}
