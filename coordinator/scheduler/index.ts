export {
  type AgentView,
  type ClusterView,
  type Reservation,
  type Resources,
  buildClusterView,
  gpuTypeOf,
  totalResources,
} from "./cluster-view.ts";
export { type Placement, type PlacementRequest, describeRequest, place, rank } from "./place.ts";
export {
  type ContainerLimits,
  type QuotaCheck,
  type WorkspaceUsage,
  NO_USAGE,
  everFitsLimits,
  fitsLimits,
  usageOf,
} from "./quota.ts";
