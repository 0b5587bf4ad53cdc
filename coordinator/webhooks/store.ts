import type { Kysely, Selectable } from "kysely";
import type { Database, WebhookDeliveryTable, WebhookTable } from "../store/index.ts";

// Webhook subscriptions and their delivery attempts. The signing secret is
// stored sealed (coordinator/webhooks seals and opens it); listings never
// select it.

export interface WebhookRecord {
  id: string;
  workspaceId: string;
  url: string;
  /** Patterns: exact names, `prefix.*` or `*`; empty means all eligible events. */
  eventTypes: string[];
  description: string;
  enabled: boolean;
  createdAt: string;
  updatedAt: string;
}

/** The sealed signing secret as stored (AES-256-GCM, coordinator/secrets/seal.ts). */
export interface SealedWebhookSecret {
  ciphertext: Buffer;
  nonce: Buffer;
  keyId: string;
}

export interface WebhookWithSecret extends WebhookRecord {
  sealedSecret: SealedWebhookSecret;
}

export interface WebhookDeliveryRecord {
  id: string;
  webhookId: string;
  eventId: string;
  eventType: string;
  statusCode: number | null;
  error: string | null;
  durationMs: number;
  attemptedAt: string;
}

/** A webhook to create: its record and sealed secret, stamped `at`. */
export type NewWebhook = Omit<WebhookWithSecret, "createdAt" | "updatedAt"> & { at: string };

export interface WebhookPatch {
  url?: string;
  eventTypes?: string[];
  description?: string;
  enabled?: boolean;
}

const PUBLIC_COLUMNS = [
  "id",
  "workspace_id",
  "url",
  "event_types_json",
  "description",
  "enabled",
  "created_at",
  "updated_at",
] as const;

type PublicRow = Pick<Selectable<WebhookTable>, (typeof PUBLIC_COLUMNS)[number]>;

const toWebhook = (r: PublicRow): WebhookRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  url: r.url,
  eventTypes: JSON.parse(r.event_types_json) as string[],
  description: r.description,
  enabled: Number(r.enabled) === 1,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

const toDelivery = (r: Selectable<WebhookDeliveryTable>): WebhookDeliveryRecord => ({
  id: r.id,
  webhookId: r.webhook_id,
  eventId: r.event_id,
  eventType: r.event_type,
  statusCode: r.status_code === null ? null : Number(r.status_code),
  error: r.error,
  durationMs: Number(r.duration_ms),
  attemptedAt: r.attempted_at,
});

export class WebhookRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async create(w: NewWebhook): Promise<WebhookRecord> {
    const row = {
      id: w.id,
      workspace_id: w.workspaceId,
      url: w.url,
      event_types_json: JSON.stringify(w.eventTypes),
      description: w.description,
      enabled: w.enabled ? 1 : 0,
      created_at: w.at,
      updated_at: w.at,
    };
    await this.db
      .insertInto("webhooks")
      .values({
        ...row,
        secret_ciphertext: w.sealedSecret.ciphertext,
        secret_nonce: w.sealedSecret.nonce,
        secret_key_id: w.sealedSecret.keyId,
      })
      .execute();
    return toWebhook(row);
  }

  /** The workspace's webhooks, oldest first. */
  async list(workspaceId: string): Promise<WebhookRecord[]> {
    const rows = await this.db
      .selectFrom("webhooks")
      .select(PUBLIC_COLUMNS)
      .where("workspace_id", "=", workspaceId)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map(toWebhook);
  }

  async count(workspaceId: string): Promise<number> {
    const r = await this.db
      .selectFrom("webhooks")
      .select((s) => s.fn.countAll().as("n"))
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  /** Undefined when there is no such webhook in this workspace. */
  async get(workspaceId: string, id: string): Promise<WebhookRecord | undefined> {
    const r = await this.db
      .selectFrom("webhooks")
      .select(PUBLIC_COLUMNS)
      .where("workspace_id", "=", workspaceId)
      .where("id", "=", id)
      .executeTakeFirst();
    return r && toWebhook(r);
  }

  /** With its sealed secret, for signing; undefined when not in this workspace. */
  async getWithSecret(workspaceId: string, id: string): Promise<WebhookWithSecret | undefined> {
    const r = await this.db
      .selectFrom("webhooks")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("id", "=", id)
      .executeTakeFirst();
    return r && withSecret(r);
  }

  /** Every enabled webhook of every workspace, with sealed secrets: the dispatcher's cache. */
  async listEnabledWithSecrets(): Promise<WebhookWithSecret[]> {
    const rows = await this.db.selectFrom("webhooks").selectAll().where("enabled", "=", 1).execute();
    return rows.map(withSecret);
  }

  /** Undefined when there is no such webhook in this workspace. */
  async update(
    workspaceId: string,
    id: string,
    patch: WebhookPatch,
    at: string,
  ): Promise<WebhookRecord | undefined> {
    const r = await this.db
      .updateTable("webhooks")
      .set({
        ...(patch.url !== undefined ? { url: patch.url } : {}),
        ...(patch.eventTypes !== undefined ? { event_types_json: JSON.stringify(patch.eventTypes) } : {}),
        ...(patch.description !== undefined ? { description: patch.description } : {}),
        ...(patch.enabled !== undefined ? { enabled: patch.enabled ? 1 : 0 } : {}),
        updated_at: at,
      })
      .where("workspace_id", "=", workspaceId)
      .where("id", "=", id)
      .returning(PUBLIC_COLUMNS)
      .executeTakeFirst();
    return r && toWebhook(r);
  }

  /** False when there was no such webhook in this workspace. Its deliveries go with it. */
  async delete(workspaceId: string, id: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom("webhooks")
      .where("workspace_id", "=", workspaceId)
      .where("id", "=", id)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  /**
   * Records one attempt and keeps only the webhook's `keep` newest. A webhook
   * deleted meanwhile has no row to attach it to: the attempt is dropped.
   */
  async recordDelivery(d: WebhookDeliveryRecord, keep: number): Promise<void> {
    const exists = await this.db
      .selectFrom("webhooks")
      .select("id")
      .where("id", "=", d.webhookId)
      .executeTakeFirst();
    if (!exists) return;
    await this.db
      .insertInto("webhook_deliveries")
      .values({
        id: d.id,
        webhook_id: d.webhookId,
        event_id: d.eventId,
        event_type: d.eventType,
        status_code: d.statusCode,
        error: d.error,
        duration_ms: Math.round(d.durationMs),
        attempted_at: d.attemptedAt,
      })
      .execute()
      .catch(async (e) => {
        // The webhook was deleted between the check and the insert (FK): nothing to record.
        const still = await this.db
          .selectFrom("webhooks")
          .select("id")
          .where("id", "=", d.webhookId)
          .executeTakeFirst();
        if (still) throw e;
      });
    const newest = this.db
      .selectFrom("webhook_deliveries")
      .select("id")
      .where("webhook_id", "=", d.webhookId)
      .orderBy("attempted_at", "desc")
      .orderBy("id", "desc")
      .limit(keep);
    await this.db
      .deleteFrom("webhook_deliveries")
      .where("webhook_id", "=", d.webhookId)
      .where("id", "not in", newest)
      .execute();
  }

  /** The webhook's most recent attempts, newest first. */
  async deliveries(webhookId: string, limit: number): Promise<WebhookDeliveryRecord[]> {
    const rows = await this.db
      .selectFrom("webhook_deliveries")
      .selectAll()
      .where("webhook_id", "=", webhookId)
      .orderBy("attempted_at", "desc")
      .orderBy("id", "desc")
      .limit(limit)
      .execute();
    return rows.map(toDelivery);
  }
}

function withSecret(r: Selectable<WebhookTable>): WebhookWithSecret {
  return {
    ...toWebhook(r),
    sealedSecret: {
      ciphertext: Buffer.from(r.secret_ciphertext),
      nonce: Buffer.from(r.secret_nonce),
      keyId: r.secret_key_id,
    },
  };
}
