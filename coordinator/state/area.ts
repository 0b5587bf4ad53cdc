// The state area (docs/queues.md): Queue, Map and Signal for the SDK's
// gateway, the REST routes and, through the agents' relay, containers.
import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { Area, AreaRoutes } from "../http/index.ts";
import type { Limits } from "../limits/index.ts";
import type { RelayRouter } from "../streams/index.ts";
import { MapStore } from "./maps.ts";
import { QueueStore } from "./queues.ts";
import { serveStateOps } from "./relay-ops.ts";
import { gatewayStateRoutes, stateRoutes } from "./routes.ts";
import { SignalStore } from "./signals.ts";
import { StateObjects } from "./state.ts";

export function stateHttpRoutes(state: StateObjects): AreaRoutes {
  return { api: [stateRoutes(state)], gateway: [gatewayStateRoutes(state)] };
}

export interface StateDeps {
  nc: NatsConnection;
  /** The queue item quota (max_queue_items) comes from it; the queues' items are reported to it. */
  limits: Pick<Limits, "get" | "report" | "onChange">;
  log: Logger;
  /** The containers' relayed calls: the state ops are served on it, and it answers the others' ops on the gateway route. */
  relay: RelayRouter;
}

export function createState(d: StateDeps): Area<StateObjects> {
  const queues = new QueueStore({ nc: d.nc, maxItems: async (ws) => (await d.limits.get(ws)).maxQueueItems });
  d.limits.report({ queueItems: (ws) => queues.items(ws) });
  // The queue stream's per-workspace bounds follow the limits.
  d.limits.onChange((ws) =>
    queues
      .limitsChanged(ws)
      .catch((e) =>
        d.log.error({ workspaceId: ws, err: describeError(e) }, "the queue stream kept its old limits"),
      ),
  );
  const state = new StateObjects(queues, new MapStore(d.nc), new SignalStore(d.nc), { foreign: d.relay });
  serveStateOps(d.relay, state);
  return {
    service: state,
    routes: stateHttpRoutes(state),
    start: () => state.signals.start(),
    stop: () => state.signals.stop(),
  };
}
