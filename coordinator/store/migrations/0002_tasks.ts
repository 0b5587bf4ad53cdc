import { type Kysely, PostgresAdapter, sql } from "kysely";

// Stubs, content-addressed objects, tasks and their status history, plus the
// per-workspace callback signature token and container limit.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  const blob = postgres ? "bytea" : "blob";

  await db.schema.alterTable("workspaces").addColumn("signature_token", "text").execute();
  await db.schema
    .alterTable("workspaces")
    .addColumn("max_containers", "integer", (c) => c.notNull().defaultTo(32))
    .execute();

  await db.schema
    .createTable("objects")
    .addColumn("id", postgres ? "serial" : "integer", (c) =>
      postgres ? c.primaryKey() : c.primaryKey().autoIncrement(),
    )
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("sha256", "text", (c) => c.notNull())
    .addColumn("size", "bigint", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .addUniqueConstraint("objects_workspace_sha256", ["workspace_id", "sha256"])
    .execute();

  await db.schema
    .createTable("stubs")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("type", "text", (c) => c.notNull())
    .addColumn("config_json", "text", (c) => c.notNull())
    .addColumn("extra_json", "text", (c) => c.notNull())
    .addColumn("config_version", "integer", (c) => c.notNull().defaultTo(1))
    .addColumn("object_id", "integer")
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .addUniqueConstraint("stubs_workspace_name_type", ["workspace_id", "name", "type"])
    .execute();

  await db.schema
    .createTable("tasks")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("stub_id", "text", (c) => c.notNull().references("stubs.id").onDelete("cascade"))
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("attempt", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("container_id", "text")
    .addColumn("agent_id", "text")
    .addColumn("stream_seq", "bigint")
    .addColumn("headless", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("callback_url", "text")
    .addColumn("expires_at", "text")
    .addColumn("error_json", "text")
    .addColumn("result", sql.raw(blob))
    .addColumn("result_json", "text")
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("started_at", "text")
    .addColumn("ended_at", "text")
    .addColumn("updated_at", "text", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("tasks_stub_status").on("tasks").columns(["stub_id", "status"]).execute();
  await db.schema
    .createIndex("tasks_workspace_created")
    .on("tasks")
    .columns(["workspace_id", "created_at"])
    .execute();
  await db.schema.createIndex("tasks_status").on("tasks").column("status").execute();

  await db.schema
    .createTable("task_events")
    .addColumn("id", postgres ? "bigserial" : "integer", (c) =>
      postgres ? c.primaryKey() : c.primaryKey().autoIncrement(),
    )
    .addColumn("task_id", "text", (c) => c.notNull().references("tasks.id").onDelete("cascade"))
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("attempt", "integer", (c) => c.notNull())
    .addColumn("container_id", "text")
    .addColumn("reason", "text")
    .addColumn("at", "text", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("task_events_task").on("task_events").column("task_id").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ["task_events", "tasks", "stubs", "objects"])
    await db.schema.dropTable(t).ifExists().execute();
  await db.schema.alterTable("workspaces").dropColumn("max_containers").execute();
  await db.schema.alterTable("workspaces").dropColumn("signature_token").execute();
}
