export {
  DELIVERIES_KEPT,
  DELIVERY_TIMEOUT_MS,
  type DeliveryOutcome,
  MAX_IN_FLIGHT,
  MAX_QUEUED,
  RELOAD_INTERVAL_MS,
  WebhookDispatcher,
  type WebhookDispatcherOptions,
  type WebhookTarget,
} from "./dispatcher.ts";
export {
  DELIVERIES_LISTED,
  MAX_WEBHOOKS_PER_WORKSPACE,
  type WebhookCreate,
  WebhookService,
  type WebhookServiceOptions,
  type WebhookUpdate,
} from "./service.ts";
export {
  EVENT_PREFIXES,
  type IsSelf,
  VALID_EVENT_PATTERNS,
  WEBHOOK_SECRET_PREFIX,
  checkEventTypes,
  checkWebhookUrl,
  newSigningSecret,
  selfUrlMatcher,
  signBody,
} from "./validate.ts";
export { webhookRoutes } from "./routes.ts";
export { WebhookRepo } from "./store.ts";
export { createWebhooks, webhooksHttpRoutes } from "./area.ts";
export type { WebhooksDeps } from "./area.ts";
