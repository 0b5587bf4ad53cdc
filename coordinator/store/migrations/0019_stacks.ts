import type { Kysely } from "kysely";

// Stacks (docs/stacks.md): a named group of deployments (and databases)
// applied as one. `stacks` holds the name, the version that is live and the
// attempt in flight (a lease, so two applies of one stack never overlap and
// a coordinator that died mid-apply does not hold the stack forever);
// `stack_versions` keeps every attempt: what was asked, what each member
// became, and for a failed attempt which member failed and why.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("stacks")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("workspace_id", "text", (c) => c.notNull().references("workspaces.id").onDelete("cascade"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("current_version", "integer", (c) => c.notNull())
    .addColumn("applying_version", "integer")
    .addColumn("lease_until", "text")
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .addUniqueConstraint("stacks_workspace_name", ["workspace_id", "name"])
    .execute();

  await db.schema
    .createTable("stack_versions")
    .addColumn("stack_id", "text", (c) => c.notNull().references("stacks.id").onDelete("cascade"))
    .addColumn("version", "integer", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("spec", "text", (c) => c.notNull())
    .addColumn("members", "text", (c) => c.notNull())
    .addColumn("failure", "text")
    .addColumn("created_at", "text", (c) => c.notNull())
    .addColumn("updated_at", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("stack_versions_pk", ["stack_id", "version"])
    .execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable("stack_versions").ifExists().execute();
  await db.schema.dropTable("stacks").ifExists().execute();
}
