// Webhook subscriptions of a workspace: create (the signing secret is shown
// once), list, update, delete, a test delivery and the recent attempts.
// Every change reloads the dispatcher, so it applies at once here; other
// coordinators see it at their next reload.

import { BerthError } from "../../shared/errors.ts";
import type { BerthEvent } from "../events/index.ts";
import { newId } from "../../shared/ids.ts";
import type { SecretKey } from "../secrets/index.ts";
import type { WebhookRepo } from "./store.ts";
import type { WorkspaceRepo } from "../store/index.ts";
import type { WebhookDeliveryRecord, WebhookPatch, WebhookRecord } from "./store.ts";
import type { DeliveryOutcome, WebhookDispatcher } from "./dispatcher.ts";
import {
  type IsSelf,
  checkDescription,
  checkEventTypes,
  checkWebhookUrl,
  newSigningSecret,
  openSigningSecret,
  sealSigningSecret,
} from "./validate.ts";

export const MAX_WEBHOOKS_PER_WORKSPACE = 20;
export const DELIVERIES_LISTED = 50;

export interface WebhookCreate {
  url: string;
  event_types?: string[] | undefined;
  description?: string | undefined;
}

export interface WebhookUpdate {
  url?: string | undefined;
  event_types?: string[] | undefined;
  description?: string | undefined;
  enabled?: boolean | undefined;
}

export interface WebhookServiceOptions {
  store: { webhooks: WebhookRepo; workspaces: WorkspaceRepo };
  key: SecretKey;
  dispatcher: WebhookDispatcher;
  isSelf: IsSelf;
  /** @default () => new Date() */
  now?: () => Date;
}

/** What the routes call; workspace ids are internal ids. */
export class WebhookService {
  private readonly now: () => Date;

  constructor(private readonly o: WebhookServiceOptions) {
    this.now = o.now ?? (() => new Date());
  }

  /** The new webhook (enabled) and its signing secret, which no other call returns. */
  async create(
    workspaceId: string,
    body: WebhookCreate,
  ): Promise<{ webhook: WebhookRecord; signingSecret: string }> {
    const url = checkWebhookUrl(body.url, this.o.isSelf);
    const eventTypes = checkEventTypes(body.event_types ?? []);
    const description = checkDescription(body.description);
    if ((await this.o.store.webhooks.count(workspaceId)) >= MAX_WEBHOOKS_PER_WORKSPACE) {
      throw new BerthError(
        "resource_exhausted",
        `this workspace has ${MAX_WEBHOOKS_PER_WORKSPACE} webhooks, the most it may have; delete one first`,
      );
    }
    const id = newId("wh");
    const signingSecret = newSigningSecret();
    const webhook = await this.o.store.webhooks.create({
      id,
      workspaceId,
      url,
      eventTypes,
      description,
      enabled: true,
      sealedSecret: sealSigningSecret(this.o.key, workspaceId, id, signingSecret),
      at: this.now().toISOString(),
    });
    await this.o.dispatcher.reload();
    return { webhook, signingSecret };
  }

  list(workspaceId: string): Promise<WebhookRecord[]> {
    return this.o.store.webhooks.list(workspaceId);
  }

  async get(workspaceId: string, id: string): Promise<WebhookRecord> {
    const w = await this.o.store.webhooks.get(workspaceId, id);
    if (!w) throw notFound(id);
    return w;
  }

  async update(workspaceId: string, id: string, body: WebhookUpdate): Promise<WebhookRecord> {
    const patch: WebhookPatch = {};
    if (body.url !== undefined) patch.url = checkWebhookUrl(body.url, this.o.isSelf);
    if (body.event_types !== undefined) patch.eventTypes = checkEventTypes(body.event_types);
    if (body.description !== undefined) patch.description = checkDescription(body.description);
    if (body.enabled !== undefined) patch.enabled = body.enabled;
    const w = await this.o.store.webhooks.update(workspaceId, id, patch, this.now().toISOString());
    if (!w) throw notFound(id);
    await this.o.dispatcher.reload();
    return w;
  }

  async delete(workspaceId: string, id: string): Promise<void> {
    if (!(await this.o.store.webhooks.delete(workspaceId, id))) throw notFound(id);
    await this.o.dispatcher.reload();
  }

  /**
   * Sends a `webhook.test` event to this webhook only (enabled or not: it is
   * how a consumer is checked before enabling it) and answers the outcome.
   */
  async test(workspaceId: string, id: string): Promise<DeliveryOutcome> {
    const w = await this.o.store.webhooks.getWithSecret(workspaceId, id);
    if (!w) throw notFound(id);
    const secret = openSigningSecret(this.o.key, w);
    if (secret === undefined) {
      throw new BerthError(
        "failed_precondition",
        `this coordinator's secrets key cannot open the signing secret of webhook ${id}; it was sealed with key ${w.sealedSecret.keyId}`,
        { id },
      );
    }
    const workspace = await this.o.store.workspaces.get(workspaceId);
    if (!workspace) throw new BerthError("not_found", `workspace ${workspaceId} not found`);
    const ev: BerthEvent = {
      id: newId("evt"),
      type: "webhook.test",
      workspaceId,
      workspaceExternalId: workspace.externalId,
      subject: id,
      time: this.now().toISOString(),
      data: { webhook_id: id, message: "a test delivery from berth" },
    };
    return this.o.dispatcher.deliver({ id, workspaceId, url: w.url, eventTypes: w.eventTypes, secret }, ev);
  }

  /** The webhook's most recent attempts, newest first. */
  async deliveries(
    workspaceId: string,
    id: string,
    limit = DELIVERIES_LISTED,
  ): Promise<WebhookDeliveryRecord[]> {
    await this.get(workspaceId, id);
    return this.o.store.webhooks.deliveries(id, limit);
  }
}

const notFound = (id: string) => new BerthError("not_found", `webhook ${id} not found`, { id });
