import type { Kysely } from "kysely";
import type { Database } from "../store/index.ts";

export interface ObjectRecord {
  id: number;
  workspaceId: string;
  sha256: string;
  size: number;
  createdAt: string;
}

const toObject = (r: {
  id: number;
  workspace_id: string;
  sha256: string;
  size: number | string;
  created_at: string;
}) => ({
  id: Number(r.id),
  workspaceId: r.workspace_id,
  sha256: r.sha256,
  size: Number(r.size),
  createdAt: r.created_at,
});

/** Which workspace holds which content-addressed object (the bytes live in coordinator/objects). */
export class ObjectRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async find(workspaceId: string, sha256: string): Promise<ObjectRecord | undefined> {
    const r = await this.db
      .selectFrom("objects")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("sha256", "=", sha256)
      .executeTakeFirst();
    return r && toObject(r);
  }

  async get(id: number): Promise<ObjectRecord | undefined> {
    const r = await this.db.selectFrom("objects").selectAll().where("id", "=", id).executeTakeFirst();
    return r && toObject(r);
  }

  /** Records the object for the workspace; an existing row is kept. */
  async add(workspaceId: string, sha256: string, size: number): Promise<ObjectRecord> {
    await this.db
      .insertInto("objects")
      .values({ workspace_id: workspaceId, sha256, size, created_at: new Date().toISOString() })
      .onConflict((oc) => oc.columns(["workspace_id", "sha256"]).doNothing())
      .execute();
    return (await this.find(workspaceId, sha256)) as ObjectRecord;
  }
}
