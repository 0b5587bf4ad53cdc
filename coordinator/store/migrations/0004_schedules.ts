import type { Kysely } from "kysely";

// One row per fired schedule tick. The primary key is what makes a tick fire
// once across coordinators: each inserts the row before submitting the task,
// and only the insert that lands submits.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("schedule_ticks")
    .addColumn("stub_id", "text", (c) => c.notNull().references("stubs.id").onDelete("cascade"))
    .addColumn("tick_at", "text", (c) => c.notNull())
    .addColumn("coordinator_id", "text", (c) => c.notNull())
    .addColumn("task_id", "text")
    .addColumn("created_at", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("schedule_ticks_pk", ["stub_id", "tick_at"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("schedule_ticks").ifExists().execute();
}
