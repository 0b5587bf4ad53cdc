import pino from "pino";
import type { DeployInput } from "../../coordinator/deployments/check.ts";
import { DeploymentService } from "../../coordinator/deployments/service.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import { type TaskHarness, stubConfig, stubExtra } from "../tasks/harness.ts";

export const HANDLER_PARAMS = { names: ["x", "y"], required: ["x"], var_keyword: false, context: false };

/** A deploy body of `kind` as berth.client.describe would send it (handler params, a cron for schedules). */
export function deployInput(
  name: string,
  kind: string,
  o: { config?: Partial<StubConfig>; extra?: Partial<StubExtra>; serve?: boolean } = {},
): DeployInput {
  return {
    name,
    kind,
    config: stubConfig(o.config),
    extra: stubExtra({
      min_containers: 0,
      concurrent_requests: 1,
      ...(kind === "asgi" ? {} : { handler_params: HANDLER_PARAMS }),
      ...(kind === "schedule" ? { when: "*/5 * * * *" } : {}),
      ...o.extra,
    }),
    ...(o.serve ? { serve: true } : {}),
  };
}

/** A deployment service over the harness's store and task service, with a clock the test moves. */
export function deploymentService(h: TaskHarness, o: { now?: { ms: number } } = {}) {
  const now = o.now ?? { ms: Date.now() };
  const service = new DeploymentService({
    repo: h.store.deployments,
    tasks: h.tasks,
    log: pino({ level: "silent" }),
    baseUrl: "http://coordinator.test:7070/",
    nats: h.nc,
    clock: () => now.ms,
  });
  return { service, now };
}
