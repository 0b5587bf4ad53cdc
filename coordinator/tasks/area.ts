// The tasks area: the task service (queues, dispatch, retries, results) and
// its status routes. The functions area mounts those routes beside its own:
// a task record lists outputs and its container's Python, which the tasks
// area (a lower tier) is handed, not imports.
import type { Area, AreaRoutes } from "../http/index.ts";
import { gatewayTaskRoutes } from "./gateway-routes.ts";
import { TaskService, type TaskServiceDeps } from "./service.ts";
import { type TaskStatusRouteDeps, taskStatusRoutes } from "./status-routes.ts";

export function tasksHttpRoutes(tasks: TaskService, o: TaskStatusRouteDeps = {}): AreaRoutes {
  return { api: [taskStatusRoutes(tasks, o)], gateway: [gatewayTaskRoutes(tasks)] };
}

export function createTasks(d: TaskServiceDeps): Area<TaskService> {
  const tasks = new TaskService(d);
  return { service: tasks, routes: {}, start: () => tasks.start(), stop: () => tasks.stop() };
}
