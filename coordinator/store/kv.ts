import type { Kysely } from "kysely";
import type { Database } from "./schema.ts";

const now = () => new Date().toISOString();

/** Small cluster-wide values (the CA, NATS credentials for agents, ...). */
export class ClusterKv {
  constructor(private readonly db: Kysely<Database>) {}

  async get(key: string): Promise<string | undefined> {
    const r = await this.db
      .selectFrom("cluster_kv")
      .select("value")
      .where("key", "=", key)
      .executeTakeFirst();
    return r?.value;
  }

  async put(key: string, value: string): Promise<void> {
    await this.db
      .insertInto("cluster_kv")
      .values({ key, value, updated_at: now() })
      .onConflict((oc) => oc.column("key").doUpdateSet({ value, updated_at: now() }))
      .execute();
  }

  async delete(key: string): Promise<void> {
    await this.db.deleteFrom("cluster_kv").where("key", "=", key).execute();
  }

  /** Every key starting with `prefix`, in key order. The prefix may not hold LIKE's `%`, `_` or `\\`. */
  async list(prefix: string): Promise<{ key: string; value: string }[]> {
    if (/[%_\\]/.test(prefix))
      throw new Error(`cluster_kv prefix ${JSON.stringify(prefix)} holds a LIKE wildcard`);
    const rows = await this.db
      .selectFrom("cluster_kv")
      .select(["key", "value"])
      .where("key", "like", `${prefix}%`)
      .orderBy("key")
      .execute();
    return rows.filter((r) => r.key.startsWith(prefix));
  }

  /** Sets `key` only if absent; returns the value that is stored afterwards. */
  async putIfAbsent(key: string, value: string): Promise<string> {
    await this.db
      .insertInto("cluster_kv")
      .values({ key, value, updated_at: now() })
      .onConflict((oc) => oc.column("key").doNothing())
      .execute();
    return (await this.get(key)) as string;
  }
}
