import type { Kysely } from "kysely";

// Per-workspace limits set by operators (docs/limits.md). A null column is
// no limit. Every existing workspace gets a row carrying the max_containers
// value it already had (workspaces.max_containers, 32 by default), so that
// limit keeps working; a workspace made later reads that column until an
// operator sets its limits.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("workspace_limits")
    .addColumn("workspace_id", "text", (c) => c.primaryKey().references("workspaces.id").onDelete("cascade"))
    .addColumn("max_containers", "integer")
    .addColumn("max_cpu_millicores", "integer")
    .addColumn("max_memory_mb", "integer")
    .addColumn("max_gpus", "integer")
    .addColumn("max_pending_tasks", "integer")
    .addColumn("updated_at", "text", (c) => c.notNull())
    .execute();
  const now = new Date().toISOString();
  const rows = await db.selectFrom("workspaces").select(["id", "max_containers"]).execute();
  for (const r of rows) {
    await db
      .insertInto("workspace_limits")
      .values({ workspace_id: r.id, max_containers: Number(r.max_containers), updated_at: now })
      .execute();
  }
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("workspace_limits").ifExists().execute();
}
