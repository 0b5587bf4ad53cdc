import type { Kysely } from "kysely";

// Managed databases (docs/databases.md): one row per database of a workspace,
// named uniquely within it. The pod that runs it, the volume holding its data
// and the secret holding its URL are named here; the password lives only in
// the (sealed) secret.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("databases")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("engine", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("stub_id", "text", (c) => c.notNull())
    .addColumn("pod_id", "text")
    .addColumn("agent_id", "text")
    .addColumn("volume", "text", (c) => c.notNull())
    .addColumn("secret_name", "text", (c) => c.notNull())
    .addColumn("local_port", "integer", (c) => c.notNull())
    .addColumn("error", "text", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .addUniqueConstraint("databases_workspace_name", ["workspace_id", "name"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("databases").ifExists().execute();
}
