import type { Kysely } from "kysely";

// Hosted inference (docs/inference.md): one usage row per /v1 request, the
// public model catalog (deployments operators publish to every workspace),
// and two more workspace limits (concurrent /v1 requests, tokens per minute).
// Times are epoch milliseconds (bigint) so the per-minute windows read the
// same on SQLite and PostgreSQL.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("inference_usage")
    .addColumn("id", "text", (c) => c.primaryKey())
    // Not foreign keys: usage outlives the token and the deployment it names.
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("token_id", "text")
    .addColumn("model", "text", (c) => c.notNull())
    .addColumn("route", "text", (c) => c.notNull())
    .addColumn("deployment_id", "text")
    .addColumn("task_id", "text")
    .addColumn("stream", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("status", "integer", (c) => c.notNull())
    .addColumn("error_code", "text")
    .addColumn("prompt_tokens", "integer")
    .addColumn("completion_tokens", "integer")
    .addColumn("total_tokens", "integer")
    .addColumn("ttft_ms", "integer")
    .addColumn("duration_ms", "integer", (c) => c.notNull())
    .addColumn("at_ms", "bigint", (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex("inference_usage_workspace_at")
    .on("inference_usage")
    .columns(["workspace_id", "at_ms"])
    .execute();

  await db.schema
    .createTable("model_catalog")
    .addColumn("workspace_id", "text", (c) => c.notNull())
    .addColumn("deployment_name", "text", (c) => c.notNull())
    .addColumn("published_at", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("model_catalog_pk", ["workspace_id", "deployment_name"])
    .execute();

  await db.schema.alterTable("workspace_limits").addColumn("max_inference_requests", "integer").execute();
  await db.schema.alterTable("workspace_limits").addColumn("max_tokens_per_minute", "integer").execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("workspace_limits").dropColumn("max_tokens_per_minute").execute();
  await db.schema.alterTable("workspace_limits").dropColumn("max_inference_requests").execute();
  await db.schema.dropTable("model_catalog").ifExists().execute();
  await db.schema.dropIndex("inference_usage_workspace_at").ifExists().execute();
  await db.schema.dropTable("inference_usage").ifExists().execute();
}
