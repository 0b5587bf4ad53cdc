// The functions area: the SDK's gateway for stubs, tasks and deploys, the
// task status and list routes, and the task-queue routes. It serves the
// tasks area's service to users; it holds no state of its own.
import type { DeploymentService } from "../deployments/index.ts";
import type { FleetView } from "../fleet/index.ts";
import type { Area, AreaRoutes } from "../http/index.ts";
import { whyStubNeverPlaceable } from "../scheduler/index.ts";
import type { TokenRepo } from "../store/index.ts";
import {
  type CostRates,
  type TaskOutputs,
  type TaskRepo,
  type TaskService,
  tasksHttpRoutes,
} from "../tasks/index.ts";
import { type ContainerExec, ContainerPythonVersions } from "../containers/index.ts";
import { gatewayDeploymentRoutes } from "./deploy-routes.ts";
import { gatewayStubRoutes } from "./stub-routes.ts";
import { taskRoutes } from "./task-routes.ts";
import { gatewayEnqueueRoutes, taskQueueRoutes } from "./taskqueue-routes.ts";

export interface FunctionsDeps {
  tokens: TokenRepo;
  tasks: TaskService;
  /** The store's task rows (the task list reads them). */
  taskRows: Pick<TaskRepo, "list">;
  deployments: DeploymentService;
  /** A task record's outputs (docs/outputs.md). */
  outputs: TaskOutputs;
  /** Agents' container APIs: a task's container is asked its Python version. */
  agents: ContainerExec;
  /** The live fleet: a deploy no agent could ever place is refused at once. */
  fleet: Pick<FleetView, "list">;
  costRates: CostRates;
}

/**
 * The routes over what is given: without `deployments` (tests that mount
 * tasks alone), the deploy and task-queue routes are left out.
 */
export function functionsHttpRoutes(
  d: Pick<FunctionsDeps, "tokens" | "tasks" | "taskRows"> &
    Partial<Omit<FunctionsDeps, "tokens" | "tasks" | "taskRows">>,
): AreaRoutes {
  const { tasks, deployments, fleet } = d;
  const pythons = d.agents ? new ContainerPythonVersions(d.agents) : undefined;
  const pythonOf = pythons ? (agentId: string, id: string) => pythons.of(agentId, id) : undefined;
  const status = tasksHttpRoutes(tasks, {
    ...(d.outputs ? { outputs: d.outputs } : {}),
    ...(pythonOf ? { pythonOf } : {}),
    ...(deployments
      ? { deploymentOf: (ws: string, stubId: string) => deployments.nameOfStub(ws, stubId) }
      : {}),
  });
  const routes: Required<Pick<AreaRoutes, "public" | "api" | "gateway">> = {
    public: [],
    api: [
      ...(status.api ?? []),
      taskRoutes({
        tasks,
        rows: d.taskRows,
        ...(d.outputs ? { outputs: d.outputs } : {}),
        ...(deployments ? { deployments } : {}),
        ...(d.costRates ? { costRates: d.costRates } : {}),
      }),
    ],
    gateway: [gatewayStubRoutes(tasks), ...(status.gateway ?? [])],
  };
  if (deployments) {
    routes.public.push(taskQueueRoutes({ tokens: d.tokens, deployments, tasks }));
    routes.gateway.push(
      gatewayDeploymentRoutes(
        deployments,
        fleet ? (stub) => whyStubNeverPlaceable(fleet.list(), stub) : undefined,
      ),
      gatewayEnqueueRoutes({ tasks }),
    );
  }
  return routes;
}

export function createFunctions(d: FunctionsDeps): Area<undefined> {
  return { service: undefined, routes: functionsHttpRoutes(d) };
}
