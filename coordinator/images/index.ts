// Images the cluster builds: placement, records and the SDK spec's steps.
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
