import type { Kysely } from "kysely";

// What an operator may turn off for a workspace's containers (docs/limits.md,
// "Opting a workspace out"): the user namespace (integer 0/1; null reads as 1,
// root inside is an unprivileged host uid) and the system call filter
// ("allowlist" or "denylist"; null reads as "allowlist").

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").addColumn("user_namespace", "integer").execute();
  await db.schema.alterTable("workspace_limits").addColumn("syscall_filter", "text").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("syscall_filter").execute();
  await db.schema.alterTable("workspace_limits").dropColumn("user_namespace").execute();
}
