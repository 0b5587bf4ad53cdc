import type { Kysely } from "kysely";

// Who asked for the work: the id of the API token whose request created a
// task or started a sandbox or pod (docs/usage.md counts usage per member by
// it). Null for rows made before these columns, and for work no token asked
// for (schedules, public endpoints, managed databases' pods). The index serves
// usage reports, which look tasks up by when they ran.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("tasks").addColumn("token_id", "text").execute();
  await db.schema.alterTable("sandboxes").addColumn("token_id", "text").execute();
  await db.schema
    .createIndex("tasks_workspace_started")
    .on("tasks")
    .columns(["workspace_id", "started_at"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex("tasks_workspace_started").execute();
  await db.schema.alterTable("sandboxes").dropColumn("token_id").execute();
  await db.schema.alterTable("tasks").dropColumn("token_id").execute();
}
