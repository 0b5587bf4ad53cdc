import type { Kysely } from "kysely";

// The workspace's volume space quota (docs/volumes.md, docs/limits.md), in
// MiB: the bytes of all its volumes together. null is no limit.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").addColumn("max_volume_mb", "integer").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("max_volume_mb").execute();
}
