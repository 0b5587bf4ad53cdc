import type { Kysely } from "kysely";

// The workspace's queue item quota (docs/queues.md, docs/limits.md): all
// items of all its Queues together. null is no limit, as for the others.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").addColumn("max_queue_items", "integer").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("max_queue_items").execute();
}
