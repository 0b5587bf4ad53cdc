// Images the cluster builds: placement, records and the SDK spec's steps.
// createImages wires the build service and the image GC for main.ts: the two
// share the record repository, the deployments that pin an image and the
// agents, and a removal through the builds goes through the GC's forget.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import type { ContainerApi, ImageBuildApi } from "../../api/index.ts";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import type { BuiltImage, BuiltImageRepo } from "./store.ts";
import { BuildOrphanCheck } from "./build-orphans.ts";
import { ImageGc, workspaceRepository } from "./gc.ts";
import { ImageBuilds, type ImageBuildsOptions } from "./service.ts";
import { deploymentsUsingImage } from "./used-by.ts";

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

export interface ImagesWiring {
  repo: BuiltImageRepo;
  /** The deployments an image is pinned by (deploymentsUsingImage). */
  deployments: Parameters<typeof deploymentsUsingImage>[0];
  planner: ImageBuildsOptions["planner"];
  agents: { client(agentId: string): ImageBuildApi & Pick<ContainerApi, "removeImage"> };
  readyAgentIds(): string[];
  secrets: NonNullable<ImageBuildsOptions["secrets"]>;
  code: NonNullable<ImageBuildsOptions["code"]>;
  registry?: ClusterRegistryAccess;
  pipIndex?: ImageBuildsOptions["pipIndex"];
  condaChannels?: string[];
  placementWaitMs: number;
  gcAfterMs: number;
  onStatus: (image: BuiltImage) => void;
  log: Logger;
  /** The coordinators' NATS: builds of a dead coordinator are marked failed (build-orphans.ts). */
  nats: NatsConnection;
}

/** The build service, the image GC and the check for a dead coordinator's builds, wired together; the caller starts the GC and the check. */
export function createImages(w: ImagesWiring): {
  builds: ImageBuilds;
  gc: ImageGc;
  orphans: BuildOrphanCheck;
} {
  const usedBy = deploymentsUsingImage(w.deployments);
  // Built images no deployment uses and unused for gcAfterMs go (docs/images.md, "Garbage collection").
  const gc = new ImageGc({
    repo: w.repo,
    usedBy,
    agents: { readyIds: w.readyAgentIds, client: (id) => w.agents.client(id) },
    ...(w.registry ? { registry: w.registry } : {}),
    afterMs: w.gcAfterMs,
    log: w.log.child({ area: "image-gc" }),
  });
  // Image builds: placed through the planner, run on an agent (docs/images.md).
  const builds = new ImageBuilds({
    repo: w.repo,
    planner: w.planner,
    agents: w.agents,
    secrets: w.secrets,
    // A Dockerfile's build context goes to the building agent as a code archive.
    code: w.code,
    ...(w.pipIndex ? { pipIndex: w.pipIndex } : {}),
    ...(w.condaChannels ? { condaChannels: w.condaChannels } : {}),
    placementWaitMs: w.placementWaitMs,
    log: w.log.child({ area: "images" }),
    onStatus: w.onStatus,
    usedBy,
    ...(w.registry ? { pushRepository: workspaceRepository } : {}),
    // berth image rm: the registry's manifest and the agents' copies go too.
    onRemove: (image) => gc.forget(image),
  });
  const orphans = new BuildOrphanCheck({
    nats: w.nats,
    repo: w.repo,
    holds: (key) => builds.holds(key),
    onStatus: w.onStatus,
    log: w.log.child({ area: "images" }),
  });
  return { builds, gc, orphans };
}
export { imageRoutes } from "./routes.ts";
export { imageEvents } from "./events.ts";
export { BuiltImageRepo } from "./store.ts";
export type { BuiltImage } from "./store.ts";
