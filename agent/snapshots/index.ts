// Snapshots of containers: their files as a new image, their memory with CRIU.
export { type OverlayDirs, overlayDirsOf, upperEntries, writeUpperLayer } from "./layer.ts";
export { type CheckpointSupport, CriuCheck, checkpointUnavailable, type RuncTarget } from "./runc-ops.ts";
export {
  ContainerSnapshots,
  type SnapshotHost,
  snapshotImageRef,
  type SnapshotOptions,
} from "./snapshots.ts";
