import type { Kysely, Selectable } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import { newId } from "../../shared/ids.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import type { Database, DeploymentTable } from "../store/index.ts";

export interface DeploymentRecord {
  id: string;
  workspaceId: string;
  name: string;
  /** 1, 2, ... per (workspace, name); 0 for a serve session. */
  version: number;
  kind: string;
  stubId: string;
  active: boolean;
  serve: boolean;
  lastRequestAt: string | null;
  /** When it was deployed or last started. */
  startedAt: string;
  createdAt: string;
  updatedAt: string;
}

/** A deployment with its stub's config and extra (what the autoscaler, the ticker and the routers read). */
export interface DeploymentWithStub extends DeploymentRecord {
  config: StubConfig;
  extra: StubExtra;
}

const toDeployment = (r: Selectable<DeploymentTable>): DeploymentRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  name: r.name,
  version: Number(r.version),
  kind: r.kind,
  stubId: r.stub_id ?? "",
  active: Number(r.active) === 1,
  serve: Number(r.serve) === 1,
  lastRequestAt: r.last_request_at,
  startedAt: r.started_at,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/** How often a version is tried again when a concurrent deploy took it first. */
const RESERVE_ATTEMPTS = 50;

export class DeploymentRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * Takes the next version of (workspace, name): the highest one so far plus
   * one. The row has no stub yet, so it is invisible to every reader until
   * attachStub; the unique (workspace, name, version) key makes concurrent
   * reservations end with distinct versions.
   */
  async reserveVersion(
    workspaceId: string,
    name: string,
    kind: string,
    at: string,
  ): Promise<DeploymentRecord> {
    for (let attempt = 0; attempt < RESERVE_ATTEMPTS; attempt++) {
      const top = await this.db
        .selectFrom("deployments")
        .select((s) => s.fn.max("version").as("v"))
        .where("workspace_id", "=", workspaceId)
        .where("name", "=", name)
        .executeTakeFirst();
      const version = Number(top?.v ?? 0) + 1;
      const row = {
        id: newId("dep"),
        workspace_id: workspaceId,
        name,
        version,
        kind,
        stub_id: null,
        active: 0,
        serve: 0,
        last_request_at: null,
        started_at: at,
        created_at: at,
        updated_at: at,
      };
      const r = await this.db
        .insertInto("deployments")
        .values(row)
        .onConflict((oc) => oc.columns(["workspace_id", "name", "version"]).doNothing())
        .executeTakeFirst();
      if (Number(r.numInsertedOrUpdatedRows ?? 0n) === 1) return toDeployment(row);
    }
    throw new BerthError("conflict", `too many concurrent deploys of ${name}; try again`);
  }

  /** Completes a reserved version: its stub, active from now on. */
  async attachStub(id: string, stubId: string, at: string): Promise<DeploymentRecord> {
    await this.db
      .updateTable("deployments")
      .set({ stub_id: stubId, active: 1, started_at: at, updated_at: at })
      .where("id", "=", id)
      .execute();
    return (await this.get(id)) as DeploymentRecord;
  }

  /**
   * Creates or updates the serve session (version 0) of (workspace, name):
   * one record per name, pointed at the latest stub and active again.
   */
  async upsertServe(
    workspaceId: string,
    name: string,
    kind: string,
    stubId: string,
    at: string,
  ): Promise<{ deployment: DeploymentRecord; created: boolean }> {
    const r = await this.db
      .insertInto("deployments")
      .values({
        id: newId("dep"),
        workspace_id: workspaceId,
        name,
        version: 0,
        kind,
        stub_id: stubId,
        active: 1,
        serve: 1,
        last_request_at: at,
        started_at: at,
        created_at: at,
        updated_at: at,
      })
      .onConflict((oc) => oc.columns(["workspace_id", "name", "version"]).doNothing())
      .executeTakeFirst();
    const created = Number(r.numInsertedOrUpdatedRows ?? 0n) === 1;
    if (!created) {
      const existing = await this.findVersion(workspaceId, name, 0);
      await this.db
        .updateTable("deployments")
        .set((eb) => ({
          kind,
          stub_id: stubId,
          active: 1,
          last_request_at: at,
          updated_at: at,
          // A session that was stopped starts anew; a running one keeps its start.
          started_at: existing?.active ? eb.ref("started_at") : eb.val(at),
        }))
        .where("workspace_id", "=", workspaceId)
        .where("name", "=", name)
        .where("version", "=", 0)
        .execute();
    }
    return { deployment: (await this.findVersion(workspaceId, name, 0)) as DeploymentRecord, created };
  }

  /** Deletes a row (a reservation whose stub could not be made, or a deleted deployment). */
  async remove(id: string): Promise<boolean> {
    const r = await this.db.deleteFrom("deployments").where("id", "=", id).executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  async get(id: string): Promise<DeploymentRecord | undefined> {
    const r = await this.db
      .selectFrom("deployments")
      .selectAll()
      .where("id", "=", id)
      .where("stub_id", "is not", null)
      .executeTakeFirst();
    return r && toDeployment(r);
  }

  /** The deployment whose stub is `stubId`, in that workspace (stopped ones too). */
  async ofStub(workspaceId: string, stubId: string): Promise<DeploymentRecord | undefined> {
    const r = await this.db
      .selectFrom("deployments")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("stub_id", "=", stubId)
      .executeTakeFirst();
    return r && toDeployment(r);
  }

  async findVersion(
    workspaceId: string,
    name: string,
    version: number,
  ): Promise<DeploymentRecord | undefined> {
    const r = await this.db
      .selectFrom("deployments")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("name", "=", name)
      .where("version", "=", version)
      .where("stub_id", "is not", null)
      .executeTakeFirst();
    return r && toDeployment(r);
  }

  /** The workspace's deployments, newest first; `name` filters. */
  async list(workspaceId: string, name?: string): Promise<DeploymentRecord[]> {
    let q = this.db
      .selectFrom("deployments")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("stub_id", "is not", null);
    if (name !== undefined) q = q.where("name", "=", name);
    const rows = await q.orderBy("created_at", "desc").orderBy("version", "desc").execute();
    return rows.map(toDeployment);
  }

  /** Every deployment of every workspace (only active ones with `activeOnly`) with its stub's config and extra. */
  async listWithStubs(o: { activeOnly?: boolean } = {}): Promise<DeploymentWithStub[]> {
    let q = this.db
      .selectFrom("deployments as d")
      .innerJoin("stubs as s", "s.id", "d.stub_id")
      .selectAll("d")
      .select(["s.config_json", "s.extra_json"]);
    if (o.activeOnly) q = q.where("d.active", "=", 1);
    const rows = await q.execute();
    return rows.map((r) => ({
      ...toDeployment(r),
      config: JSON.parse(r.config_json) as StubConfig,
      extra: JSON.parse(r.extra_json) as StubExtra,
    }));
  }

  async setActive(id: string, active: boolean, at: string): Promise<DeploymentRecord | undefined> {
    await this.db
      .updateTable("deployments")
      .set(active ? { active: 1, started_at: at, updated_at: at } : { active: 0, updated_at: at })
      .where("id", "=", id)
      .execute();
    return this.get(id);
  }

  async touch(id: string, at: string): Promise<void> {
    await this.db.updateTable("deployments").set({ last_request_at: at }).where("id", "=", id).execute();
  }

  /** Serve sessions with no request (nor deploy) since `before`. */
  async idleServeSessions(before: string): Promise<DeploymentRecord[]> {
    const rows = await this.db
      .selectFrom("deployments")
      .selectAll()
      .where("serve", "=", 1)
      .where("stub_id", "is not", null)
      .where((eb) => eb(eb.fn.coalesce("last_request_at", "created_at"), "<", before))
      .execute();
    return rows.map(toDeployment);
  }
}
