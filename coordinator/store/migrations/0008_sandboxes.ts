import type { Kysely } from "kysely";

// Sandboxes and pods (docs/sandboxes.md): one row per container started for a
// `sandbox` or `pod` stub (the id is the container id), the filesystem
// snapshots taken of them as images (img-...), and memory snapshots (snap-...).
// Both kinds of snapshot live on one agent's disk, so each row names it.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("sandboxes")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("stub_id", "text", (c) => c.notNull().references("stubs.id").onDelete("cascade"))
    .addColumn("agent_id", "text", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("ttl_seconds", "integer", (c) => c.notNull())
    .addColumn("last_active_at", "text", (c) => c.notNull())
    .addColumn("expires_at", "text")
    .addColumn("ports_json", "text", (c) => c.notNull())
    .addColumn("egress_json", "text", (c) => c.notNull())
    .addColumn("image_id", "text")
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("terminated_at", "text")
    .addColumn("terminated_reason", "text")
    .execute();
  await db.schema
    .createIndex("sandboxes_workspace_created")
    .on("sandboxes")
    .columns(["workspace_id", "created_at"])
    .execute();
  await db.schema
    .createIndex("sandboxes_status_expires")
    .on("sandboxes")
    .columns(["status", "expires_at"])
    .execute();
  await db.schema
    .createTable("sandbox_images")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("agent_id", "text", (c) => c.notNull())
    .addColumn("image_ref", "text", (c) => c.notNull())
    .addColumn("source_sandbox_id", "text", (c) => c.notNull())
    .addColumn("size_bytes", "bigint", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .execute();
  await db.schema
    .createTable("sandbox_snapshots")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("agent_id", "text", (c) => c.notNull())
    .addColumn("source_sandbox_id", "text", (c) => c.notNull())
    .addColumn("stub_id", "text", (c) => c.notNull().references("stubs.id").onDelete("cascade"))
    .addColumn("ports_json", "text", (c) => c.notNull())
    .addColumn("egress_json", "text", (c) => c.notNull())
    .addColumn("size_bytes", "bigint", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("sandbox_snapshots").ifExists().execute();
  await db.schema.dropTable("sandbox_images").ifExists().execute();
  await db.schema.dropTable("sandboxes").ifExists().execute();
}
