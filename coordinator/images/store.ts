// Images the cluster built, per workspace (docs/images.md, "Builds through
// the coordinator"). A row is written when the agent has fixed the image id
// (status building) and updated once the build ends (ready or failed).

import type { Kysely } from "kysely";
import type { Database } from "../store/index.ts";

export const BUILT_IMAGE_STATUSES = ["building", "ready", "failed"] as const;
export type BuiltImageStatus = (typeof BUILT_IMAGE_STATUSES)[number];

export interface BuiltImage {
  workspaceId: string;
  imageId: string;
  status: BuiltImageStatus;
  baseImage: string;
  baseDigest: string;
  /** The agent that built it. */
  agentId: string;
  /** What a RunContainerRequest.image names on that agent; "" until ready. */
  ref: string;
  digest: string;
  /** Step names, in order. */
  steps: string[];
  /** Why it failed; "" otherwise. */
  error: string;
  createdAt: string;
  updatedAt: string;
}

/** The built_images table (migration 0012_built_images); steps is JSON, error "" unless failed. */
interface BuiltImageTable {
  workspace_id: string;
  image_id: string;
  status: string;
  base_image: string;
  base_digest: string;
  agent_id: string;
  ref: string;
  digest: string;
  steps: string;
  error: string;
  created_at: string;
  updated_at: string;
}

type Row = BuiltImageTable;
/** The store's database with this table (kept here, beside the only code that reads it). */
type WithBuiltImages = Database & { built_images: BuiltImageTable };

const fromRow = (r: Row): BuiltImage => ({
  workspaceId: r.workspace_id,
  imageId: r.image_id,
  status: r.status as BuiltImageStatus,
  baseImage: r.base_image,
  baseDigest: r.base_digest,
  agentId: r.agent_id,
  ref: r.ref,
  digest: r.digest,
  steps: JSON.parse(r.steps) as string[],
  error: r.error,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export class BuiltImageRepo {
  private readonly db: Kysely<WithBuiltImages>;

  constructor(db: Kysely<Database>) {
    this.db = db as unknown as Kysely<WithBuiltImages>;
  }

  /** Inserts or replaces the row of (workspace, image id). */
  async put(i: BuiltImage): Promise<void> {
    const row: Row = {
      workspace_id: i.workspaceId,
      image_id: i.imageId,
      status: i.status,
      base_image: i.baseImage,
      base_digest: i.baseDigest,
      agent_id: i.agentId,
      ref: i.ref,
      digest: i.digest,
      steps: JSON.stringify(i.steps),
      error: i.error,
      created_at: i.createdAt,
      updated_at: i.updatedAt,
    };
    await this.db.transaction().execute(async (tx) => {
      await tx
        .deleteFrom("built_images")
        .where("workspace_id", "=", i.workspaceId)
        .where("image_id", "=", i.imageId)
        .execute();
      await tx.insertInto("built_images").values(row).execute();
    });
  }

  async get(workspaceId: string, imageId: string): Promise<BuiltImage | undefined> {
    const r = await this.db
      .selectFrom("built_images")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("image_id", "=", imageId)
      .executeTakeFirst();
    return r ? fromRow(r) : undefined;
  }

  /**
   * Marks the image failed with `error`, only while it is still `building`
   * and its row is the one `updatedAt` names (not a newer build of the same
   * image): whether it did. The survivors' end of a dead coordinator's build
   * (coordinator/images/build-orphans.ts); two at once end it once.
   */
  async failIfBuilding(
    workspaceId: string,
    imageId: string,
    updatedAt: string,
    error: string,
    at: string,
  ): Promise<boolean> {
    const r = await this.db
      .updateTable("built_images")
      .set({ status: "failed", error, updated_at: at })
      .where("workspace_id", "=", workspaceId)
      .where("image_id", "=", imageId)
      .where("status", "=", "building")
      .where("updated_at", "=", updatedAt)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Removes the row; whether there was one. */
  async delete(workspaceId: string, imageId: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom("built_images")
      .where("workspace_id", "=", workspaceId)
      .where("image_id", "=", imageId)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  /** Every workspace's images, least recently used first (the image GC's scan). */
  async listAll(): Promise<BuiltImage[]> {
    const rows = await this.db.selectFrom("built_images").selectAll().orderBy("updated_at").execute();
    return rows.map(fromRow);
  }

  /** Newest first. */
  async list(workspaceId: string): Promise<BuiltImage[]> {
    const rows = await this.db
      .selectFrom("built_images")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .orderBy("created_at", "desc")
      .orderBy("image_id")
      .execute();
    return rows.map(fromRow);
  }
}
