// Image builds on an agent: steps as runc containers, one cached layer each.
export {
  BUILD_CACHE_REPO,
  BUILD_LABEL,
  type BuildHost,
  buildImageId,
  checkBuildRequest,
  FAILURE_TAIL_LINES,
  ImageBuilder,
  stepCacheKey,
} from "./builder.ts";
export { checkMicromambaBin } from "./micromamba.ts";
export { type ClusterPusher, PushingBuilds } from "./push.ts";
