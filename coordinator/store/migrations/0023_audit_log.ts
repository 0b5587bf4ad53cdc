import type { Kysely } from "kysely";

// The audit trail (docs/roles.md, Audit trail): one row per change made
// through the API. Append-only: the coordinator inserts and reads rows, and
// has no path that updates or deletes one.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("audit_log")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("at", "text", (c) => c.notNull())
    .addColumn("token_id", "text", (c) => c.notNull())
    .addColumn("token_name", "text", (c) => c.notNull())
    .addColumn("role", "text", (c) => c.notNull())
    .addColumn("cluster_admin", "integer", (c) => c.notNull())
    .addColumn("client_ip", "text", (c) => c.notNull())
    .addColumn("user_agent", "text", (c) => c.notNull())
    .addColumn("action", "text", (c) => c.notNull())
    .addColumn("method", "text", (c) => c.notNull())
    .addColumn("route", "text", (c) => c.notNull())
    .addColumn("object_id", "text")
    .addColumn("status", "integer", (c) => c.notNull())
    .addColumn("outcome", "text", (c) => c.notNull())
    .addColumn("error_code", "text")
    .execute();
  await db.schema
    .createIndex("audit_log_workspace_at")
    .on("audit_log")
    .columns(["workspace_id", "at", "id"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("audit_log").execute();
}
