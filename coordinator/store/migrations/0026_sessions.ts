import type { Kysely } from "kysely";

// Single sign-on sessions (docs/sso.md) are token records of kind "session":
// made by an OpenID Connect login with the role the operator's group mapping
// gives, they expire (expires_at) and name the provider's user (subject).
// API tokens are kind "token" and never expire.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable("tokens")
    .addColumn("kind", "text", (c) => c.notNull().defaultTo("token"))
    .execute();
  await db.schema.alterTable("tokens").addColumn("expires_at", "text").execute();
  await db.schema.alterTable("tokens").addColumn("subject", "text").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("tokens").dropColumn("subject").execute();
  await db.schema.alterTable("tokens").dropColumn("expires_at").execute();
  await db.schema.alterTable("tokens").dropColumn("kind").execute();
}
