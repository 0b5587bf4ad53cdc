import { type Kysely, PostgresAdapter, sql } from "kysely";

// Webhook subscriptions (docs/webhooks.md) and the record of each delivery
// attempt. The signing secret must be usable to sign, so it cannot be hashed:
// it is sealed with the coordinator's secrets key like a workspace secret.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  const blob = sql.raw(postgres ? "bytea" : "blob");
  await db.schema
    .createTable("webhooks")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("url", "text", (c) => c.notNull())
    .addColumn("event_types_json", "text", (c) => c.notNull())
    .addColumn("description", "text", (c) => c.notNull())
    .addColumn("enabled", "integer", (c) => c.notNull().defaultTo(1))
    .addColumn("secret_ciphertext", blob, (c) => c.notNull())
    .addColumn("secret_nonce", blob, (c) => c.notNull())
    .addColumn("secret_key_id", "text", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex("webhooks_workspace_created")
    .on("webhooks")
    .columns(["workspace_id", "created_at"])
    .execute();
  await db.schema
    .createTable("webhook_deliveries")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("webhook_id", "text", (c) => c.notNull().references("webhooks.id").onDelete("cascade"))
    .addColumn("event_id", "text", (c) => c.notNull())
    .addColumn("event_type", "text", (c) => c.notNull())
    .addColumn("status_code", "integer")
    .addColumn("error", "text")
    .addColumn("duration_ms", "integer", (c) => c.notNull())
    .addColumn("attempted_at", "text", (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex("webhook_deliveries_webhook_attempted")
    .on("webhook_deliveries")
    .columns(["webhook_id", "attempted_at"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("webhook_deliveries").ifExists().execute();
  await db.schema.dropTable("webhooks").ifExists().execute();
}
