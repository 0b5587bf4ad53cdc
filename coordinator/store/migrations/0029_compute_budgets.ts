import type { Kysely } from "kysely";

// GPU-hours and CPU-hours a workspace may use per UTC calendar month
// (docs/limits.md); null: no budget.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").addColumn("gpu_hours_per_month", "integer").execute();
  await db.schema.alterTable("workspace_limits").addColumn("cpu_hours_per_month", "integer").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("cpu_hours_per_month").execute();
  await db.schema.alterTable("workspace_limits").dropColumn("gpu_hours_per_month").execute();
}
