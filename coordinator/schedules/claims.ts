import type { Kysely } from "kysely";
import type { Database } from "../store/index.ts";
import type { TickClaims } from "./ticker.ts";

/**
 * The store side of exactly-once ticks: a tick belongs to the coordinator
 * whose insert of (stub_id, tick_at) lands; every other insert of the same
 * key is ignored by the primary key (ON CONFLICT DO NOTHING, on SQLite and
 * PostgreSQL alike).
 */
export class ScheduleTickRepo implements TickClaims {
  constructor(private readonly db: Kysely<Database>) {}

  async claim(stubId: string, tickAt: Date, coordinatorId: string): Promise<boolean> {
    const r = await this.db
      .insertInto("schedule_ticks")
      .values({
        stub_id: stubId,
        tick_at: tickAt.toISOString(),
        coordinator_id: coordinatorId,
        task_id: null,
        created_at: new Date().toISOString(),
      })
      .onConflict((oc) => oc.columns(["stub_id", "tick_at"]).doNothing())
      .executeTakeFirst();
    return Number(r.numInsertedOrUpdatedRows ?? 0n) === 1;
  }

  async recordTask(stubId: string, tickAt: Date, taskId: string): Promise<void> {
    await this.db
      .updateTable("schedule_ticks")
      .set({ task_id: taskId })
      .where("stub_id", "=", stubId)
      .where("tick_at", "=", tickAt.toISOString())
      .execute();
  }

  /**
   * Deletes ticks older than `before`, except each schedule's newest: that
   * one must stay, or a coordinator starting later would see its tick as
   * missed and fire it again.
   */
  async prune(before: Date): Promise<number> {
    const r = await this.db
      .deleteFrom("schedule_ticks as t")
      .where("t.tick_at", "<", before.toISOString())
      .where((eb) =>
        eb(
          "t.tick_at",
          "<",
          eb
            .selectFrom("schedule_ticks as newest")
            .select((s) => s.fn.max("newest.tick_at").as("m"))
            .whereRef("newest.stub_id", "=", "t.stub_id"),
        ),
      )
      .executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  /** The recorded ticks of one schedule, oldest first (for operators and tests). */
  async list(stubId: string): Promise<{ tickAt: string; coordinatorId: string; taskId: string | null }[]> {
    const rows = await this.db
      .selectFrom("schedule_ticks")
      .select(["tick_at", "coordinator_id", "task_id"])
      .where("stub_id", "=", stubId)
      .orderBy("tick_at")
      .execute();
    return rows.map((r) => ({ tickAt: r.tick_at, coordinatorId: r.coordinator_id, taskId: r.task_id }));
  }
}
