// Image builds on an agent: a base image plus shell steps, each step run in a
// container of the agent's runtime and committed as one cached layer
// (docs/images.md, "Builds"). Like ContainerApi, the agent's host and the
// gRPC client implement this same interface.

import type { GpuRequest } from "./containers.ts";

/** One build step: a shell command run with `/bin/sh -c` on top of the previous step's files. */
export interface BuildStep {
  /** What progress lines call the step (e.g. "pip install numpy"). */
  name: string;
  /** The shell command. */
  run: string;
  /**
   * A code archive (ContainerApi.putCode, already on the agent) mounted
   * read-only at /mnt/code while the step runs: a Dockerfile's build context
   * for COPY. Its hash is part of the step's cache key.
   */
  code?: { sha256: string };
  /**
   * The step runs `micromamba`: where the parent image has none, the agent's
   * configured binary (`--micromamba-bin`) is on the step's PATH; with
   * neither, the build fails before any step runs (docs/images.md, "micromamba").
   */
  micromamba?: boolean;
}

export interface BuildImageRequest {
  /** The image the first step runs on; the agent's default image when absent. */
  baseImage?: string;
  /** Registry credentials for pulling the base; never logged. */
  baseCredentials?: { username: string; password: string };
  /**
   * The SDK's `base_image_creds` as variable → value (Docker Hub, ECR, Google
   * Artifact Registry, NGC or any registry's variables; docs/images.md,
   * "Credentials"), resolved by the agent; never logged. Not with baseCredentials.
   */
  baseImageCreds?: Record<string, string>;
  steps: BuildStep[];
  /** KEY=VALUE seen by every step (and part of each step's cache key). */
  env?: Record<string, string>;
  /**
   * Secrets every step sees as environment variables (`with_secrets`). Their
   * values are in no layer, config, history, event or log line: step output
   * shows them as `***`. Their names (not values) are part of the cache key.
   */
  secretEnv?: Record<string, string>;
  /** CPU cores and memory of each step's container. @default 1 core, 1 GiB */
  cpu?: number;
  memoryBytes?: number;
  /**
   * Push the built image to the cluster registry as `<repository>:<image id>`
   * (docs/images.md, "The cluster registry"), reporting `push` events;
   * `done.pushedRef` names it. Absent: the image stays on this agent.
   */
  pushRepository?: string;
  /** build_with_gpu: every step's container gets these GPUs, injected as any container's. */
  gpu?: GpuRequest;
}

export type BuildEvent =
  /**
   * The pull of the base image, before `base`: blobs and bytes in the
   * agent's cache of all (blobs it had count as done). None when the base
   * is cached, or when another build's pull of it is already running.
   */
  | {
      type: "pull";
      ref: string;
      blobsDone: number;
      blobsTotal: number;
      bytesDone: number;
      bytesTotal: number;
      blobsSkipped: number;
    }
  /** The base resolved to a digest; imageId is fixed from here on. */
  | { type: "base"; imageId: string; ref: string; digest: string }
  /** A step begins (cached: its layer exists and nothing runs). */
  | { type: "step"; index: number; total: number; name: string; cached: boolean }
  | { type: "output"; index: number; stream: "stdout" | "stderr"; line: string }
  | { type: "step_done"; index: number; cached: boolean; seconds: number; digest: string }
  /** The push to the cluster registry: blobs and bytes done of all (blobs the registry had count as done). */
  | {
      type: "push";
      ref: string;
      blobsDone: number;
      blobsTotal: number;
      bytesDone: number;
      bytesTotal: number;
      blobsSkipped: number;
    }
  /**
   * The image: `ref` is what a RunContainerRequest.image on this agent names;
   * `pushedRef` (registry/repository@digest), when pushed, what every agent names.
   */
  | {
      type: "done";
      imageId: string;
      ref: string;
      digest: string;
      cachedSteps: number;
      builtSteps: number;
      pushedRef?: string;
    };

export interface ImageBuildApi {
  /**
   * Builds (or finds in the step cache) the image; events as it goes. A step
   * that exits non-zero ends the stream with `image_build_failed`, whose
   * details name the step, its exit code and its last output lines.
   * Concurrent builds of the same image id share one build.
   */
  buildImage(req: BuildImageRequest, opts?: { signal?: AbortSignal }): AsyncIterable<BuildEvent>;
}
