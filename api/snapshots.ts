// Snapshots of a running container: its filesystem as a new image, and its
// memory (CRIU). Like ContainerApi, the agent's host and the gRPC client
// implement this same interface (docs/sandboxes.md).

import type { ContainerStatus, ImageSummary, RunContainerRequest } from "./containers.ts";

export interface ContainerSnapshotApi {
  /**
   * The container's image plus everything written in its root filesystem
   * since it started, as a new image in this agent's image store, known by
   * `ref` afterwards (a RunContainerRequest.image on this agent).
   */
  commitFilesystem(containerId: string, ref: string): Promise<ImageSummary>;
  /**
   * Whether this host can checkpoint memory (`criu check` passes); the reason
   * when not. Checked once and remembered.
   */
  checkpointSupport(): Promise<{ supported: boolean; reason?: string }>;
  /**
   * `runc checkpoint --leave-running` into the agent's snapshot store under
   * snapshotId. checkpoint_unavailable (with the criu check output) when the
   * host cannot.
   */
  checkpointMemory(containerId: string, snapshotId: string): Promise<{ snapshotId: string; sizeBytes: number }>;
  /** A new container restored from a snapshot (`runc restore`), with the request's id, labels and limits. */
  restoreMemory(snapshotId: string, req: RunContainerRequest): Promise<ContainerStatus>;
}
