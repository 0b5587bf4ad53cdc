// Stacks (docs/stacks.md) on SQLite and PostgreSQL: the stack row (its live
// version and the attempt in flight) and one row per attempt.
//
// Two applies of one stack never overlap: `begin` takes the stack's lease
// with one compare-and-set (no attempt in flight, or its lease ran out) and
// writes the attempt's row; a second apply meanwhile gets `conflict` naming
// the attempt in flight. `finish` ends the attempt and gives the lease back.
// A lease that ran out (its coordinator stopped mid-apply) is taken over by
// the next apply, which marks that attempt `abandoned`.

import { randomUUID } from "node:crypto";
import type { Kysely, Selectable } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import type { Database, StackTable, StackVersionTable } from "../store/index.ts";

export type StackVersionStatus = "applying" | "ready" | "rolled_back" | "abandoned";

export interface StackRecord {
  id: string;
  workspaceId: string;
  name: string;
  /** The version whose members are live; 0 before an attempt succeeded. */
  currentVersion: number;
  /** The attempt in flight, if any. */
  applyingVersion: number | null;
  leaseUntil: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface StackVersionRecord<Spec = unknown, Member = unknown> {
  stackId: string;
  version: number;
  status: StackVersionStatus;
  spec: Spec;
  members: Member[];
  failure: { member: string; reason: string } | null;
  createdAt: string;
  updatedAt: string;
}

const toStack = (r: Selectable<StackTable>): StackRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  name: r.name,
  currentVersion: Number(r.current_version),
  applyingVersion: r.applying_version === null ? null : Number(r.applying_version),
  leaseUntil: r.lease_until,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

const toVersion = <S, M>(r: Selectable<StackVersionTable>): StackVersionRecord<S, M> => ({
  stackId: r.stack_id,
  version: Number(r.version),
  status: r.status as StackVersionStatus,
  spec: JSON.parse(r.spec) as S,
  members: JSON.parse(r.members) as M[],
  failure: r.failure === null ? null : (JSON.parse(r.failure) as { member: string; reason: string }),
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export class StackRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** A new stack with no version yet; conflict when the workspace has one of that name. */
  async create(workspaceId: string, name: string, at: string): Promise<StackRecord> {
    const row = {
      id: `stk-${randomUUID().replace(/-/g, "").slice(0, 20)}`,
      workspace_id: workspaceId,
      name,
      current_version: 0,
      applying_version: null,
      lease_until: null,
      created_at: at,
      updated_at: at,
    };
    const r = await this.db
      .insertInto("stacks")
      .values(row)
      .onConflict((oc) => oc.columns(["workspace_id", "name"]).doNothing())
      .executeTakeFirst();
    if (Number(r.numInsertedOrUpdatedRows ?? 0n) !== 1)
      throw new BerthError(
        "conflict",
        `the workspace has a stack named ${name} already: update it with PUT /api/v1/stack/{ws}/{stackId}`,
      );
    return toStack(row);
  }

  /** The workspace's stack; undefined for another workspace's. */
  async get(workspaceId: string, id: string): Promise<StackRecord | undefined> {
    const r = await this.db
      .selectFrom("stacks")
      .selectAll()
      .where("id", "=", id)
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    return r ? toStack(r) : undefined;
  }

  async byName(workspaceId: string, name: string): Promise<StackRecord | undefined> {
    const r = await this.db
      .selectFrom("stacks")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("name", "=", name)
      .executeTakeFirst();
    return r ? toStack(r) : undefined;
  }

  /** The workspace's stacks by name. */
  async list(workspaceId: string): Promise<StackRecord[]> {
    const rows = await this.db
      .selectFrom("stacks")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .orderBy("name", "asc")
      .execute();
    return rows.map(toStack);
  }

  /**
   * Takes the stack's lease for a new attempt (version = the highest so far
   * + 1) and records it as `applying`. conflict while another attempt holds
   * an unexpired lease; an expired one is marked abandoned.
   */
  async begin<S, M>(
    stackId: string,
    spec: S,
    members: M[],
    at: string,
    leaseUntil: string,
  ): Promise<StackVersionRecord<S, M>> {
    const stack = await this.db.selectFrom("stacks").selectAll().where("id", "=", stackId).executeTakeFirst();
    if (!stack) throw new BerthError("not_found", `stack ${stackId} not found`);
    const top = await this.db
      .selectFrom("stack_versions")
      .select((s) => s.fn.max("version").as("v"))
      .where("stack_id", "=", stackId)
      .executeTakeFirst();
    const version = Number(top?.v ?? 0) + 1;
    const stale = stack.applying_version;
    const taken = await this.db.transaction().execute(async (tx) => {
      const u = await tx
        .updateTable("stacks")
        .set({ applying_version: version, lease_until: leaseUntil, updated_at: at })
        .where("id", "=", stackId)
        .where((eb) =>
          stale === null
            ? eb("applying_version", "is", null)
            : eb.and([eb("applying_version", "=", stale), eb("lease_until", "<", at)]),
        )
        .executeTakeFirst();
      if (Number(u.numUpdatedRows) !== 1) return false;
      if (stale !== null) {
        await tx
          .updateTable("stack_versions")
          .set({
            status: "abandoned",
            failure: JSON.stringify({
              member: "",
              reason: "the coordinator applying it stopped before it ended",
            }),
            updated_at: at,
          })
          .where("stack_id", "=", stackId)
          .where("version", "=", stale)
          .where("status", "=", "applying")
          .execute();
      }
      await tx
        .insertInto("stack_versions")
        .values({
          stack_id: stackId,
          version,
          status: "applying",
          spec: JSON.stringify(spec),
          members: JSON.stringify(members),
          failure: null,
          created_at: at,
          updated_at: at,
        })
        .execute();
      return true;
    });
    if (!taken) {
      const now = await this.db.selectFrom("stacks").selectAll().where("id", "=", stackId).executeTakeFirst();
      throw new BerthError(
        "conflict",
        `stack ${stack.name} is being applied (version ${now?.applying_version ?? "?"}): try again when that attempt has ended`,
      );
    }
    const row = await this.db
      .selectFrom("stack_versions")
      .selectAll()
      .where("stack_id", "=", stackId)
      .where("version", "=", version)
      .executeTakeFirstOrThrow();
    return toVersion<S, M>(row);
  }

  /** Writes the attempt's members as they are now (progress others can read); `leaseUntil` renews its lease. */
  async progress<M>(
    stackId: string,
    version: number,
    members: M[],
    at: string,
    leaseUntil?: string,
  ): Promise<void> {
    await this.db
      .updateTable("stack_versions")
      .set({ members: JSON.stringify(members), updated_at: at })
      .where("stack_id", "=", stackId)
      .where("version", "=", version)
      .execute();
    if (leaseUntil === undefined) return;
    await this.db
      .updateTable("stacks")
      .set({ lease_until: leaseUntil })
      .where("id", "=", stackId)
      .where("applying_version", "=", version)
      .execute();
  }

  /**
   * Ends the attempt (ready: it becomes the stack's live version) and gives
   * the lease back. False when the attempt had lost its lease meanwhile.
   */
  async finish<M>(
    stackId: string,
    version: number,
    outcome: { status: "ready" | "rolled_back"; members: M[]; failure?: { member: string; reason: string } },
    at: string,
  ): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const u = await tx
        .updateTable("stacks")
        .set({
          applying_version: null,
          lease_until: null,
          updated_at: at,
          ...(outcome.status === "ready" ? { current_version: version } : {}),
        })
        .where("id", "=", stackId)
        .where("applying_version", "=", version)
        .executeTakeFirst();
      const held = Number(u.numUpdatedRows) === 1;
      await tx
        .updateTable("stack_versions")
        .set({
          status: held ? outcome.status : "abandoned",
          members: JSON.stringify(outcome.members),
          failure: outcome.failure ? JSON.stringify(outcome.failure) : null,
          updated_at: at,
        })
        .where("stack_id", "=", stackId)
        .where("version", "=", version)
        .execute();
      return held;
    });
  }

  async version<S, M>(stackId: string, version: number): Promise<StackVersionRecord<S, M> | undefined> {
    const r = await this.db
      .selectFrom("stack_versions")
      .selectAll()
      .where("stack_id", "=", stackId)
      .where("version", "=", version)
      .executeTakeFirst();
    return r ? toVersion<S, M>(r) : undefined;
  }

  /** The stack's attempts, newest first. */
  async versions<S, M>(stackId: string, limit = 20): Promise<StackVersionRecord<S, M>[]> {
    const rows = await this.db
      .selectFrom("stack_versions")
      .selectAll()
      .where("stack_id", "=", stackId)
      .orderBy("version", "desc")
      .limit(limit)
      .execute();
    return rows.map((r) => toVersion<S, M>(r));
  }
}
