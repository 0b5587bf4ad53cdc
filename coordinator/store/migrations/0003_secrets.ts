import { type Kysely, PostgresAdapter, sql } from "kysely";

// Workspace secrets, encrypted at rest (coordinator/secrets): the key never
// enters the database; key_id says which key sealed a row.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  const blob = sql.raw(postgres ? "bytea" : "blob");
  await db.schema
    .createTable("secrets")
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("ciphertext", blob, (c) => c.notNull())
    .addColumn("nonce", blob, (c) => c.notNull())
    .addColumn("key_id", "text", (c) => c.notNull())
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .addUniqueConstraint("secrets_workspace_name", ["workspace_id", "name"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("secrets").ifExists().execute();
}
