import { type Kysely, PostgresAdapter } from "kysely";

// Metrics (docs/metrics.md): container usage samples from agents, pool
// capacity-vs-use samples from coordinators, and indexes for the per-stub
// task figures. Sample times are epoch milliseconds (bigint), not ISO text
// like the other tables: the time-series queries bucket them with integer
// arithmetic that reads the same on SQLite and PostgreSQL.

// biome-ignore lint/suspicious/noExplicitAny: migrations must not depend on the current schema type
export async function up(db: Kysely<any>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  const real = postgres ? "double precision" : "real";

  await db.schema
    .createTable("container_samples")
    .addColumn("container_id", "text", (c) => c.notNull())
    .addColumn("at_ms", "bigint", (c) => c.notNull())
    .addColumn("agent_id", "text", (c) => c.notNull())
    .addColumn("pool", "text", (c) => c.notNull())
    // Not foreign keys: samples of a deleted workspace or stub are pruned with age.
    .addColumn("workspace_id", "text")
    .addColumn("stub_id", "text")
    .addColumn("cpu_cores", real, (c) => c.notNull())
    .addColumn("memory_bytes", "bigint", (c) => c.notNull())
    .addColumn("cpu_limit_cores", real, (c) => c.notNull())
    .addColumn("memory_limit_bytes", "bigint", (c) => c.notNull())
    .addColumn("gpu_count", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("gpu_utilization", real)
    .addColumn("gpu_memory_bytes", "bigint")
    .addPrimaryKeyConstraint("container_samples_pk", ["container_id", "at_ms"])
    .execute();
  await db.schema
    .createIndex("container_samples_workspace_at")
    .on("container_samples")
    .columns(["workspace_id", "at_ms"])
    .execute();
  await db.schema
    .createIndex("container_samples_stub_at")
    .on("container_samples")
    .columns(["stub_id", "at_ms"])
    .execute();
  await db.schema.createIndex("container_samples_at").on("container_samples").column("at_ms").execute();

  await db.schema
    .createTable("pool_samples")
    .addColumn("pool", "text", (c) => c.notNull())
    /** Start of the sampling interval: the key that lets one coordinator write per interval. */
    .addColumn("bucket_ms", "bigint", (c) => c.notNull())
    .addColumn("at_ms", "bigint", (c) => c.notNull())
    .addColumn("coordinator_id", "text", (c) => c.notNull())
    .addColumn("agents", "integer", (c) => c.notNull())
    .addColumn("cpu_capacity_cores", real, (c) => c.notNull())
    .addColumn("cpu_allocated_cores", real, (c) => c.notNull())
    .addColumn("cpu_used_cores", real, (c) => c.notNull())
    .addColumn("memory_capacity_bytes", "bigint", (c) => c.notNull())
    .addColumn("memory_allocated_bytes", "bigint", (c) => c.notNull())
    .addColumn("memory_used_bytes", "bigint", (c) => c.notNull())
    .addColumn("gpu_capacity", "integer", (c) => c.notNull())
    .addColumn("gpu_allocated", "integer", (c) => c.notNull())
    .addPrimaryKeyConstraint("pool_samples_pk", ["pool", "bucket_ms"])
    .execute();
  await db.schema.createIndex("pool_samples_bucket").on("pool_samples").column("bucket_ms").execute();

  // Task figures per stub read tasks by creation and by end time.
  await db.schema.createIndex("tasks_stub_created").on("tasks").columns(["stub_id", "created_at"]).execute();
  await db.schema.createIndex("tasks_stub_ended").on("tasks").columns(["stub_id", "ended_at"]).execute();
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex("tasks_stub_ended").ifExists().execute();
  await db.schema.dropIndex("tasks_stub_created").ifExists().execute();
  await db.schema.dropTable("pool_samples").ifExists().execute();
  await db.schema.dropTable("container_samples").ifExists().execute();
}
