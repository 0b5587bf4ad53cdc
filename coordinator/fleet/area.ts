// The fleet area's routes: joins (public, the join token is the check) and
// the agent list, join tokens and revocation (token-scoped). Its services are
// opened by the cluster (coordinator/cluster.ts), each a lifecycle step.
import type { AreaRoutes } from "../http/index.ts";
import type { FleetView } from "./fleet-view.ts";
import type { JoinService } from "./join.ts";
import type { AgentRevoker } from "./revoke.ts";
import { fleetRoutes, joinRoutes } from "./routes.ts";
import type { AgentRepo, JoinTokenRepo } from "./store.ts";

export function fleetHttpRoutes(d: {
  store: { agents: AgentRepo; joinTokens: JoinTokenRepo };
  view: FleetView;
  join: JoinService;
  /** `berth agent revoke` (POST /api/v1/agents/{id}/revoke) exists when given. */
  revoker?: AgentRevoker;
}): AreaRoutes {
  return { public: [joinRoutes(d.join)], api: [fleetRoutes(d.store, d.view, d.revoker)] };
}
