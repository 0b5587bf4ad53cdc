// The volumes area's entry point: what other areas may use of it.
export { stubBucketMounts } from "./buckets.ts";
export { volumeRoutes } from "./routes.ts";
export type { VolumeRouteDeps } from "./routes.ts";
export { VolumeFiles } from "./volume-files.ts";
export { createVolumes, volumesHttpRoutes } from "./area.ts";
export type { VolumesDeps } from "./area.ts";
