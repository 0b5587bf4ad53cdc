import type { Kysely } from "kysely";

// Prompt plus completion tokens a workspace's /v1 requests may use per UTC
// calendar month (docs/limits.md); null: no budget.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").addColumn("v1_tokens_per_month", "integer").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("v1_tokens_per_month").execute();
}
