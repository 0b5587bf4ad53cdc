// Entry point of schedules: the ticker that fires deployed cron schedules
// exactly once per tick across coordinators (docs/schedules.md).

import { hostname } from "node:os";
import type { Kysely } from "kysely";
import type { Database } from "../store/index.ts";
import { ScheduleTickRepo } from "./claims.ts";
import { ScheduleTicker, type ScheduleTickerOptions } from "./ticker.ts";

export { ScheduleTickRepo } from "./claims.ts";
export type {
  ActiveSchedule,
  ScheduleSource,
  ScheduleTickerOptions,
  SubmitTick,
  TickClaims,
  TickerTimers,
} from "./ticker.ts";
export { ScheduleTicker } from "./ticker.ts";

export type CreateScheduleTickerOptions = Omit<ScheduleTickerOptions, "claims" | "coordinatorId"> & {
  /** The store's database (Store.db); ticks are claimed in its schedule_ticks table. */
  db: Kysely<Database>;
  /** @default `${hostname}/${pid}` */
  coordinatorId?: string;
};

/** A ticker claiming ticks in the store. Call start() once the source can answer, stop() on shutdown. */
export function createScheduleTicker(o: CreateScheduleTickerOptions): ScheduleTicker {
  const { db, coordinatorId, ...rest } = o;
  return new ScheduleTicker({
    ...rest,
    coordinatorId: coordinatorId ?? `${hostname()}/${process.pid}`,
    claims: new ScheduleTickRepo(db),
  });
}
export { parseCron } from "./cron.ts";
