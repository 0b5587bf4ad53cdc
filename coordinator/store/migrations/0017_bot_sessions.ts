import type { Kysely } from "kysely";

// Bot sessions (docs/bots.md): each session's markers per location and its
// transitions in flight, kept as one JSON document with a version for
// compare-and-set, and its history as append-only rows (seq = the version the
// change made). Both live in the store so a session survives a coordinator
// restart.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("bot_sessions")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("bot_name", "text", (c) => c.notNull())
    .addColumn("state", "text", (c) => c.notNull())
    .addColumn("version", "integer", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex("bot_sessions_workspace")
    .on("bot_sessions")
    .columns(["workspace_id", "bot_name"])
    .execute();

  await db.schema
    .createTable("bot_session_events")
    .addColumn("session_id", "text", (c) => c.notNull().references("bot_sessions.id").onDelete("cascade"))
    .addColumn("seq", "integer", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("body", "text", (c) => c.notNull())
    .addColumn("at", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("bot_session_events_pk", ["session_id", "seq"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("bot_session_events").ifExists().execute();
  await db.schema.dropIndex("bot_sessions_workspace").ifExists().execute();
  await db.schema.dropTable("bot_sessions").ifExists().execute();
}
