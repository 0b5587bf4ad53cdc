import type { Kysely } from "kysely";

// Roles of workspace tokens (docs/roles.md): each token gets one, and may be
// narrowed to named deployments. Tokens made before roles keep what they could
// do: admin tokens become the workspace's admins (and stay cluster admins,
// is_admin), every other token a developer.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable("tokens")
    .addColumn("role", "text", (c) => c.notNull().defaultTo("developer"))
    .execute();
  await db.schema.alterTable("tokens").addColumn("deployments", "text").execute();
  await db.updateTable("tokens").set({ role: "admin" }).where("is_admin", "=", 1).execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("tokens").dropColumn("deployments").execute();
  await db.schema.alterTable("tokens").dropColumn("role").execute();
}
