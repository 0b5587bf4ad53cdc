import type { Kysely } from "kysely";

// The exit code of a sandbox's or pod's container once it ended on its own
// (docs/sandboxes.md, Pods): a pod whose entrypoint exits 0 finished; null
// while it runs, and when it was ended from outside (terminate, TTL, a lost agent).

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("sandboxes").addColumn("exit_code", "integer").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("sandboxes").dropColumn("exit_code").execute();
}
