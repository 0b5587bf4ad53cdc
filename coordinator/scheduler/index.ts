export {
  type AgentView,
  type ClusterView,
  type Reservation,
  type Resources,
  buildClusterView,
  gangAddressOf,
  gpuTypeOf,
  totalResources,
} from "./cluster-view.ts";
export {
  type Placement,
  type PlacementRequest,
  describeRequest,
  place,
  rank,
} from "./place.ts";
export {
  type ContainerLimits,
  type QuotaCheck,
  type WorkspaceUsage,
  NO_USAGE,
  everFitsLimits,
  fitsLimits,
  usageOf,
} from "./quota.ts";
export {
  type GangPlan,
  type Held,
  type IdleCandidate,
  type PreemptCandidate,
  type Plan,
  type PlanRequest,
  type ReservationKind,
  planGang,
  planPlacement,
} from "./plan.ts";
export {
  type ContainerOwner,
  type GangReserveResult,
  Planner,
  type ReserveRequest,
  type ReserveResult,
  type WaitOptions,
} from "./planner.ts";
export { whyStubNeverPlaceable } from "./feasible.ts";
export { cpuMillicores, gpuWish } from "./stub-resources.ts";
export { likelyAgents } from "./likely.ts";
