import type { Kysely } from "kysely";

// Deployments (docs/deployments.md): one row per version of a named, deployed
// stub. The unique (workspace_id, name, version) key is what hands concurrent
// deploys of one name distinct versions; a serve session is version 0.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("deployments")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("version", "integer", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    // Null only between reserving a version and creating its stub.
    .addColumn("stub_id", "text", (c) => c.references("stubs.id").onDelete("cascade"))
    .addColumn("active", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("serve", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("last_request_at", "text")
    .addColumn("started_at", "text", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .addUniqueConstraint("deployments_workspace_name_version", ["workspace_id", "name", "version"])
    .execute();
  await db.schema
    .createIndex("deployments_workspace_created")
    .on("deployments")
    .columns(["workspace_id", "created_at"])
    .execute();
  await db.schema.createIndex("deployments_stub").on("deployments").column("stub_id").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("deployments").ifExists().execute();
}
