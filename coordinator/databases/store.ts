import type { Kysely, Selectable } from "kysely";
import type { DatabaseEngine, DatabaseStatus } from "../../shared/databases.ts";
import type { Database, DatabaseTable } from "../store/index.ts";

export type { DatabaseEngine, DatabaseStatus } from "../../shared/databases.ts";

export interface DatabaseRecord {
  id: string;
  workspaceId: string;
  name: string;
  engine: DatabaseEngine;
  status: DatabaseStatus;
  /** The pod stub the database runs as. */
  stubId: string;
  /** The pod's container while one runs (or is starting); null when stopped. */
  podId: string | null;
  agentId: string | null;
  /** The workspace volume holding the data. */
  volume: string;
  /** The workspace secret holding the connection URL. */
  secretName: string;
  /** The port the URL names on 127.0.0.1 inside the workspace's containers. */
  localPort: number;
  /** Why the last start failed; "" otherwise. */
  error: string;
  createdAt: string;
  updatedAt: string;
}

const toRecord = (r: Selectable<DatabaseTable>): DatabaseRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  name: r.name,
  engine: r.engine as DatabaseEngine,
  status: r.status as DatabaseStatus,
  stubId: r.stub_id,
  podId: r.pod_id,
  agentId: r.agent_id,
  volume: r.volume,
  secretName: r.secret_name,
  localPort: Number(r.local_port),
  error: r.error,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export type NewDatabase = Omit<DatabaseRecord, "podId" | "agentId" | "error" | "updatedAt" | "status">;

/** Managed database records (docs/databases.md), scoped by workspace. */
export class DatabaseRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** A new record in state `starting`; undefined when the workspace already has one of this name. */
  async insert(d: NewDatabase): Promise<DatabaseRecord | undefined> {
    const row: DatabaseTable = {
      id: d.id,
      workspace_id: d.workspaceId,
      name: d.name,
      engine: d.engine,
      status: "starting",
      stub_id: d.stubId,
      pod_id: null,
      agent_id: null,
      volume: d.volume,
      secret_name: d.secretName,
      local_port: d.localPort,
      error: "",
      created_at: d.createdAt,
      updated_at: d.createdAt,
    };
    // The unique (workspace_id, name) decides a race between two creates.
    const r = await this.db
      .insertInto("databases")
      .values(row)
      .onConflict((oc) => oc.columns(["workspace_id", "name"]).doNothing())
      .executeTakeFirst();
    if (Number(r.numInsertedOrUpdatedRows ?? 0n) === 0) return undefined;
    return toRecord(row);
  }

  async find(workspaceId: string, name: string): Promise<DatabaseRecord | undefined> {
    const r = await this.db
      .selectFrom("databases")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("name", "=", name)
      .executeTakeFirst();
    return r && toRecord(r);
  }

  async list(workspaceId: string): Promise<DatabaseRecord[]> {
    const rows = await this.db
      .selectFrom("databases")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .orderBy("name")
      .execute();
    return rows.map(toRecord);
  }

  /** The local ports the workspace's databases already use. */
  async localPorts(workspaceId: string): Promise<number[]> {
    const rows = await this.db
      .selectFrom("databases")
      .select("local_port")
      .where("workspace_id", "=", workspaceId)
      .execute();
    return rows.map((r) => Number(r.local_port));
  }

  /** Sets status, pod and error at once. */
  async setState(
    id: string,
    s: { status: DatabaseStatus; podId: string | null; agentId: string | null; error?: string },
    at: string,
  ): Promise<void> {
    await this.db
      .updateTable("databases")
      .set({ status: s.status, pod_id: s.podId, agent_id: s.agentId, error: s.error ?? "", updated_at: at })
      .where("id", "=", id)
      .execute();
  }

  async delete(id: string): Promise<void> {
    await this.db.deleteFrom("databases").where("id", "=", id).execute();
  }
}
