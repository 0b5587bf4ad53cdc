import { Type } from "@sinclair/typebox";
import { NextCursor, pageQuery, pageRequest, paginate } from "../http/index.ts";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { WebhookDeliveryRecord, WebhookRecord } from "./store.ts";
import type { WebhookCreate, WebhookService, WebhookUpdate } from "./index.ts";
import { principalOf } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";

// Webhook subscriptions (docs/webhooks.md). The signing secret appears in
// the create response only; no other route returns it.

export const WebhookBody = Type.Object({
  id: Type.String(),
  url: Type.String(),
  event_types: Type.Array(Type.String()),
  description: Type.String(),
  enabled: Type.Boolean(),
  created_at: Type.String({ format: "date-time" }),
  updated_at: Type.String({ format: "date-time" }),
});

export const WebhookDeliveryBody = Type.Object({
  id: Type.String(),
  event_id: Type.String(),
  event_type: Type.String(),
  status_code: Type.Union([Type.Integer(), Type.Null()], { description: "the consumer's HTTP status" }),
  error: Type.Union([Type.String(), Type.Null()], { description: "why no response came" }),
  ok: Type.Boolean({ description: "a 2xx response came" }),
  duration_ms: Type.Integer(),
  attempted_at: Type.String({ format: "date-time" }),
});

const webhookJson = (w: WebhookRecord) => ({
  id: w.id,
  url: w.url,
  event_types: w.eventTypes,
  description: w.description,
  enabled: w.enabled,
  created_at: w.createdAt,
  updated_at: w.updatedAt,
});

const deliveryJson = (d: WebhookDeliveryRecord) => ({
  id: d.id,
  event_id: d.eventId,
  event_type: d.eventType,
  status_code: d.statusCode,
  error: d.error,
  ok: d.statusCode !== null && d.statusCode >= 200 && d.statusCode <= 299,
  duration_ms: d.durationMs,
  attempted_at: d.attemptedAt,
});

const errors = {
  400: ErrorResponse,
  401: ErrorResponse,
  403: ErrorResponse,
  404: ErrorResponse,
  412: ErrorResponse,
  429: ErrorResponse,
};
const WsParams = Type.Object({ ws: Type.String() });
const IdParams = Type.Object({ ws: Type.String(), webhookId: Type.String() });
// URLs and patterns are checked by the service, whose messages name what is wrong.
const EventTypes = Type.Array(Type.String(), {
  description: "exact names, `prefix.*` or `*`; empty means all eligible events",
});

/** `{ws}` is the caller's own workspace (external id); any other reads as not found. */
function workspaceOf(req: FastifyRequest): string {
  const { ws } = req.params as { ws: string };
  const workspace = principalOf(req).workspace;
  if (ws !== workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
  return workspace.id;
}

const idOf = (req: FastifyRequest) => (req.params as { webhookId: string }).webhookId;

/** The list name cursors of the webhook list carry. */
const LIST = "webhooks";

/** `/api/v1/webhook/{ws}`: list, create, update, delete and test the workspace's webhooks. */
export function webhookRoutes(webhooks: WebhookService): FastifyPluginAsync {
  return async (app) => {
    app.get(
      "/api/v1/webhook/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's webhooks, oldest first, a page at a time",
          params: WsParams,
          querystring: pageQuery({}),
          response: {
            200: Type.Object({ webhooks: Type.Array(WebhookBody), next_cursor: NextCursor }),
            ...errors,
          },
        },
      },
      async (req) => {
        const page = pageRequest(LIST, req.query as { limit?: number; cursor?: string }, 2);
        const all = await webhooks.list(workspaceOf(req));
        const { items, next_cursor } = paginate(LIST, all, (w) => [w.createdAt, w.id], page);
        return { webhooks: items.map(webhookJson), next_cursor };
      },
    );

    app.post(
      "/api/v1/webhook/:ws",
      {
        config: { access: { needs: "write", audit: "webhook.create" } },
        schema: {
          summary: "Creates a webhook; answers it with its signing secret, shown this once",
          params: WsParams,
          body: Type.Object(
            {
              url: Type.String(),
              event_types: Type.Optional(EventTypes),
              description: Type.Optional(Type.String()),
            },
            { additionalProperties: false },
          ),
          response: {
            201: Type.Composite([
              WebhookBody,
              Type.Object({
                signing_secret: Type.String({
                  description: "`whsec_...`; shown once, in this response only",
                }),
              }),
            ]),
            ...errors,
          },
        },
      },
      async (req, reply) => {
        const ws = workspaceOf(req);
        const { webhook, signingSecret } = await webhooks.create(ws, req.body as WebhookCreate);
        reply.status(201);
        return { ...webhookJson(webhook), signing_secret: signingSecret };
      },
    );

    app.patch(
      "/api/v1/webhook/:ws/:webhookId",
      {
        config: { access: { needs: "write", audit: "webhook.update" } },
        schema: {
          summary: "Changes a webhook's URL, event types, description or whether it is enabled",
          params: IdParams,
          body: Type.Object(
            {
              url: Type.Optional(Type.String()),
              event_types: Type.Optional(EventTypes),
              description: Type.Optional(Type.String()),
              enabled: Type.Optional(Type.Boolean()),
            },
            { additionalProperties: false },
          ),
          response: { 200: WebhookBody, ...errors },
        },
      },
      async (req) => {
        const ws = workspaceOf(req);
        return webhookJson(await webhooks.update(ws, idOf(req), req.body as WebhookUpdate));
      },
    );

    app.delete(
      "/api/v1/webhook/:ws/:webhookId",
      {
        config: { access: { needs: "write", audit: "webhook.delete" } },
        schema: {
          summary: "Deletes a webhook",
          params: IdParams,
          response: { 204: Type.Null(), ...errors },
        },
      },
      async (req, reply) => {
        const ws = workspaceOf(req);
        await webhooks.delete(ws, idOf(req));
        reply.status(204).send();
      },
    );

    app.post(
      "/api/v1/webhook/:ws/:webhookId/test",
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Sends a webhook.test event to this webhook alone, enabled or not; answers the delivery",
          // No body: whatever comes is ignored.
          params: IdParams,
          response: { 200: Type.Object({ delivery: WebhookDeliveryBody }), ...errors },
        },
      },
      async (req) => {
        const ws = workspaceOf(req);
        return { delivery: deliveryJson(await webhooks.test(ws, idOf(req))) };
      },
    );

    app.get(
      "/api/v1/webhook/:ws/:webhookId/deliveries",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The webhook's most recent delivery attempts, newest first",
          params: IdParams,
          querystring: Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })) }),
          response: { 200: Type.Object({ deliveries: Type.Array(WebhookDeliveryBody) }), ...errors },
        },
      },
      async (req) => {
        const ws = workspaceOf(req);
        const { limit } = req.query as { limit?: number };
        return { deliveries: (await webhooks.deliveries(ws, idOf(req), limit)).map(deliveryJson) };
      },
    );
  };
}
