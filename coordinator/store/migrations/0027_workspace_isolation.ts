import type { Kysely } from "kysely";

// A workspace whose containers must all run under gVisor (docs/limits.md,
// docs/runtime.md): set by an operator beside the workspace's limits. null
// leaves it to each stub's own isolation=.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").addColumn("isolation", "text").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("isolation").execute();
}
