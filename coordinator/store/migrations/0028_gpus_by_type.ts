import type { Kysely } from "kysely";

// GPUs a workspace may hold at once by type (docs/limits.md): a JSON object
// {"A100": 2, "H100": 1} beside its other limits; null: no limit by type.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").addColumn("max_gpus_by_type", "text").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("max_gpus_by_type").execute();
}
