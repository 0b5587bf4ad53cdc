// The webhooks area (docs/webhooks.md): signed deliveries of the events this
// coordinator stored, and the webhook routes.
import type { Logger } from "pino";
import type { EventFeed } from "../events/index.ts";
import type { Area, AreaRoutes } from "../http/index.ts";
import type { SecretKey } from "../secrets/index.ts";
import { WebhookDispatcher } from "./dispatcher.ts";
import { webhookRoutes } from "./routes.ts";
import { WebhookService, type WebhookServiceOptions } from "./service.ts";
import type { IsSelf } from "./validate.ts";

export function webhooksHttpRoutes(webhooks: WebhookService): AreaRoutes {
  return { api: [webhookRoutes(webhooks)] };
}

export interface WebhooksDeps {
  store: WebhookServiceOptions["store"];
  key: SecretKey;
  /** The events this coordinator stored: each is delivered once across coordinators. */
  feed: EventFeed;
  /** URLs of this coordinator itself are refused as targets. */
  isSelf: IsSelf;
  log: Logger;
}

export function createWebhooks(d: WebhooksDeps): Area<WebhookService> {
  const dispatcher = new WebhookDispatcher({ repo: d.store.webhooks, key: d.key, log: d.log });
  const webhooks = new WebhookService({ store: d.store, key: d.key, dispatcher, isSelf: d.isSelf });
  return {
    service: webhooks,
    routes: webhooksHttpRoutes(webhooks),
    start: () => dispatcher.start(d.feed),
    stop: () => dispatcher.stop(),
  };
}
