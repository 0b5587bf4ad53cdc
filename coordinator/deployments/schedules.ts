// Schedules are deployments: the ticker (coordinator/schedules) reads the
// latest active version of each schedule name from the store on every poll
// (so a deploy, stop or start on any coordinator is seen within a second) and
// fires a tick by submitting a task with an empty JSON body.

import type { Kysely } from "kysely";
import {
  type CreateScheduleTickerOptions,
  createScheduleTicker,
  type ScheduleTicker,
} from "../schedules/index.ts";
import type { ActiveSchedule, ScheduleSource, SubmitTick } from "../schedules/index.ts";
import type { DeploymentRepo } from "./store.ts";
import type { Database } from "../store/index.ts";
import type { TaskService } from "../tasks/index.ts";
import { latestActiveVersions } from "./states.ts";

const EMPTY_BODY = new TextEncoder().encode("{}");

/** The latest active version of each schedule name; `since` is when it was deployed or last started. */
export class DeploymentScheduleSource implements ScheduleSource {
  constructor(private readonly repo: DeploymentRepo) {}

  async activeSchedules(): Promise<ActiveSchedule[]> {
    const active = await this.repo.listWithStubs({ activeOnly: true });
    return latestActiveVersions(active)
      .filter((d) => d.kind === "schedule" && d.extra.when)
      .map((d) => ({
        stubId: d.stubId,
        workspaceId: d.workspaceId,
        when: d.extra.when as string,
        since: new Date(d.startedAt),
      }));
  }
}

/** Submits one tick: a task of the schedule's stub whose JSON body is `{}` (the function takes no arguments). */
export function submitScheduleTick(tasks: Pick<TaskService, "submit">): SubmitTick {
  return async (stubId, workspaceId) => {
    const [taskId] = await tasks.submit(workspaceId, stubId, [EMPTY_BODY], { payloadFormat: "json" });
    return taskId as string;
  };
}

export type DeploymentTickerOptions = Omit<CreateScheduleTickerOptions, "source" | "submit"> & {
  db: Kysely<Database>;
  repo: DeploymentRepo;
  tasks: Pick<TaskService, "submit">;
};

/** The schedule ticker over deployments; main.ts starts it after the task service and stops it first. */
export function createDeploymentTicker(o: DeploymentTickerOptions): ScheduleTicker {
  const { repo, tasks, ...rest } = o;
  return createScheduleTicker({
    ...rest,
    source: new DeploymentScheduleSource(repo),
    submit: submitScheduleTick(tasks),
  });
}
