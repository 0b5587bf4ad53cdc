// What the image store answers and takes (ImageInfo, the pull and import
// options, a removal's result): the shapes the agent's routes and the gRPC
// host hand on, kept apart from the store's implementation (store.ts) so a
// reader of the contract need not read the cache's locking and unpacking.

import type { RegistryCredentials } from "./credentials.ts";
import type { ImageRuntimeConfig } from "./oci-layout.ts";
import type { PullProgress } from "./pull-progress.ts";

export interface ImageInfo {
  /** The reference this answer is for (canonical), or the first one the image has. */
  ref: string;
  refs: string[];
  /** "sha256:..."; for pulled images, the registry's manifest digest. */
  digest: string;
  /**
   * The image's unpacked layers as overlay lower dirs, uppermost first
   * (short absolute paths; whiteouts in overlay form). Read-only by
   * contract: layers are shared by every image and container that has them.
   */
  layers: string[];
  /** Apparent size of the unpacked layers. */
  sizeBytes: number;
  pulledAt: string;
  lastUsedAt: string;
  source: "registry" | "import";
  inUseBy: string[];
  config: ImageRuntimeConfig;
}

export interface PullOptions {
  credentials?: RegistryCredentials;
  /** Cancels the pull (skopeo/umoci are killed). A pull shared with other callers is cancelled for all. */
  signal?: AbortSignal;
  /**
   * Blobs and bytes fetched so far, while the image's blobs are copied
   * (agent/images/pull-progress.ts). Not called when the image is cached;
   * a caller that joins a pull already running gets no reports.
   */
  onProgress?: (p: PullProgress) => void;
}

export interface ImportOptions {
  /** The reference the image is known by afterwards, e.g. "python:3.11" (normalised like a pull). */
  name: string;
}

export interface RemoveResult {
  untagged: string[];
  removed: string[];
}
