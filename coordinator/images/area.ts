// The images area's factory: builds, the image GC and the orphaned-build sweep, and the image routes.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import type { ContainerApi, ImageBuildApi } from "../../api/index.ts";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import type { BuiltImage, BuiltImageRepo } from "./store.ts";
import { BuildOrphanCheck } from "./build-orphans.ts";
import { ImageGc, imageGcIntervalMs, workspaceRepository } from "./gc.ts";
import { ImageBuilds, type ImageBuildsOptions } from "./service.ts";
import { deploymentsUsingImage } from "./used-by.ts";
import { type HandPullDeps, HandPulls } from "./hand-pull.ts";
import { serveLayerPeers } from "./layer-peers.ts";
import { parseRegistryUrl } from "../../shared/registry-client.ts";

import type { Area, AreaRoutes } from "../http/index.ts";
import { imageRoutes } from "./routes.ts";

export interface ImagesDeps {
  repo: BuiltImageRepo;
  /** The deployments an image is pinned by (deploymentsUsingImage). */
  deployments: Parameters<typeof deploymentsUsingImage>[0];
  planner: ImageBuildsOptions["planner"];
  agents: { client(agentId: string): ImageBuildApi & Pick<ContainerApi, "removeImage"> };
  readyAgentIds(): string[];
  /** `berth image pull`: the ready agents with their pools, and one agent's pull (the pull ahead's). */
  handPull: Pick<HandPullDeps, "ready" | "pullOn">;
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

export function imagesHttpRoutes(builds: ImageBuilds, pulls: HandPulls): AreaRoutes {
  return { api: [imageRoutes(builds, pulls)] };
}

/** The build service, the image GC and the check for a dead coordinator's builds, wired together. */
export function createImages(w: ImagesDeps): Area<ImageBuilds> {
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
  const pulls = new HandPulls({
    repo: w.repo,
    ...w.handPull,
    ...(w.registry ? { registryHost: parseRegistryUrl(w.registry.url).host } : {}),
  });
  let stopLayerPeers: (() => void) | undefined;
  return {
    service: builds,
    routes: imagesHttpRoutes(builds, pulls),
    async start() {
      // Agents ask which peers to take layers from (docs/images.md, "Layers from peers").
      stopLayerPeers = serveLayerPeers(w.nats, w.handPull.ready);
      gc.start(imageGcIntervalMs(w.gcAfterMs));
      try {
        await orphans.start();
      } catch (e) {
        stopLayerPeers?.();
        await gc.stop();
        throw e;
      }
    },
    async stop() {
      stopLayerPeers?.();
      await orphans.stop();
      await gc.stop();
    },
  };
}
