import type { Kysely } from "kysely";
import { newId } from "../../shared/ids.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import type { Database } from "../store/index.ts";

export interface StubRecord {
  id: string;
  workspaceId: string;
  name: string;
  type: string;
  config: StubConfig;
  extra: StubExtra;
  configVersion: number;
  objectId: number | null;
  createdAt: string;
  updatedAt: string;
}

export interface StubInput {
  name: string;
  type: string;
  config: StubConfig;
  extra: StubExtra;
  objectId: number | null;
}

/** JSON with object keys sorted, so that key order alone never reads as a change. */
export function canonicalJson(v: unknown): string {
  return JSON.stringify(v, (_k, val) =>
    val && typeof val === "object" && !Array.isArray(val)
      ? Object.fromEntries(Object.entries(val).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : val,
  );
}

const toStub = (r: Database["stubs"]): StubRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  name: r.name,
  type: r.type,
  config: JSON.parse(r.config_json) as StubConfig,
  extra: JSON.parse(r.extra_json) as StubExtra,
  configVersion: Number(r.config_version),
  objectId: r.object_id === null ? null : Number(r.object_id),
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export class StubRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * Gets or creates the stub (workspace, name, type). A changed config, extra
   * or object raises config_version by one.
   */
  async upsert(
    workspaceId: string,
    s: StubInput,
  ): Promise<{ stub: StubRecord; created: boolean; changed: boolean }> {
    const config_json = canonicalJson(s.config);
    const extra_json = canonicalJson(s.extra);
    const existing = await this.find(workspaceId, s.name, s.type);
    if (!existing) {
      const at = new Date().toISOString();
      const row = {
        id: newId("stub"),
        workspace_id: workspaceId,
        name: s.name,
        type: s.type,
        config_json,
        extra_json,
        config_version: 1,
        object_id: s.objectId,
        created_at: at,
        updated_at: at,
      };
      await this.db
        .insertInto("stubs")
        .values(row)
        .onConflict((oc) => oc.columns(["workspace_id", "name", "type"]).doNothing())
        .execute();
      const stored = await this.find(workspaceId, s.name, s.type);
      if (stored?.id === row.id) return { stub: stored, created: true, changed: true };
      // Lost a race with another creator: theirs is the stub; compare against it.
      return this.upsert(workspaceId, s);
    }
    const same =
      canonicalJson(existing.config) === config_json &&
      canonicalJson(existing.extra) === extra_json &&
      existing.objectId === s.objectId;
    if (same) return { stub: existing, created: false, changed: false };
    const updatedAt = new Date().toISOString();
    await this.db
      .updateTable("stubs")
      .set((eb) => ({
        config_json,
        extra_json,
        object_id: s.objectId,
        updated_at: updatedAt,
        config_version: eb("config_version", "+", 1),
      }))
      .where("id", "=", existing.id)
      .execute();
    return { stub: (await this.get(existing.id)) as StubRecord, created: false, changed: true };
  }

  async get(id: string): Promise<StubRecord | undefined> {
    const r = await this.db.selectFrom("stubs").selectAll().where("id", "=", id).executeTakeFirst();
    return r && toStub(r);
  }

  async find(workspaceId: string, name: string, type: string): Promise<StubRecord | undefined> {
    const r = await this.db
      .selectFrom("stubs")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("name", "=", name)
      .where("type", "=", type)
      .executeTakeFirst();
    return r && toStub(r);
  }
}
