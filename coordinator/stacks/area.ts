// The stacks area (docs/stacks.md): deployments and databases applied as one,
// each member through its own area's service.
import type { Logger } from "pino";
import type { DatabaseService } from "../databases/index.ts";
import type { Area, AreaRoutes } from "../http/index.ts";
import { DatabaseMembers } from "./database-member.ts";
import { type DeploymentMemberDeps, DeploymentMembers } from "./deployment-member.ts";
import { stackRoutes } from "./routes.ts";
import { StackService } from "./service.ts";
import type { StackRepo } from "./store.ts";

export function stacksHttpRoutes(stacks: StackService): AreaRoutes {
  return { api: [stackRoutes(stacks)] };
}

export interface StacksDeps {
  repo: StackRepo;
  databases: Pick<DatabaseService, "create" | "get" | "start" | "stop" | "delete">;
  deployments: DeploymentMemberDeps;
  log: Logger;
}

export function createStacks(d: StacksDeps): Area<StackService> {
  const stacks = new StackService({
    repo: d.repo,
    kinds: [new DatabaseMembers(d.databases), new DeploymentMembers(d.deployments)],
    log: d.log,
  });
  return { service: stacks, routes: stacksHttpRoutes(stacks) };
}
