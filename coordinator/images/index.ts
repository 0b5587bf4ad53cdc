// Images the cluster builds: placement, records and the SDK spec's steps.
// createImages (area.ts) builds the area for main.ts: the build service, the
// image GC and the sweep of a dead coordinator's builds.

export { createImages, imagesHttpRoutes } from "./area.ts";
export type { ImagesDeps } from "./area.ts";
export { BUILD_COORDINATOR_DIED, BuildOrphanCheck, IMAGE_BUILDS_RUNNING_SUBJECT } from "./build-orphans.ts";
export { IMAGE_BUILD_KIND, ImageBuilds, type ImageBuildsOptions, type ImageBuildUpdate } from "./service.ts";
export { deploymentsUsingImage } from "./used-by.ts";
export {
  buildRequestOf,
  ENSURE_PIP_STEP,
  type ImageSpec,
  needsBuild,
  type PipIndex,
  pipStep,
  shellQuote,
} from "./steps.ts";
export {
  checkClusterRegistry,
  checkImageGcAfter,
  IMAGE_GC_AFTER_DEFAULT_MS,
  ImageGc,
  type ImageGcOptions,
  imageGcIntervalMs,
  workspaceRepository,
} from "./gc.ts";

export { imageRoutes } from "./routes.ts";
export { type AgentPull, type HandPull, type HandPullDeps, HandPulls } from "./hand-pull.ts";
export { imageEvents } from "./events.ts";
export { BuiltImageRepo } from "./store.ts";
export type { BuiltImage } from "./store.ts";
