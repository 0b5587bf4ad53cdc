import type { Kysely } from "kysely";

// Images the cluster built (docs/images.md, "Builds through the
// coordinator"): one row per workspace and image id, with its status
// (building, ready, failed), where it was built and what it is on that agent.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("built_images")
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("image_id", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("base_image", "text", (c) => c.notNull())
    .addColumn("base_digest", "text", (c) => c.notNull())
    .addColumn("agent_id", "text", (c) => c.notNull())
    .addColumn("ref", "text", (c) => c.notNull())
    .addColumn("digest", "text", (c) => c.notNull())
    .addColumn("steps", "text", (c) => c.notNull())
    .addColumn("error", "text", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("built_images_pk", ["workspace_id", "image_id"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("built_images").ifExists().execute();
}
