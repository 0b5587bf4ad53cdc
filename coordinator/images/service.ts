// Image builds through the coordinator (docs/images.md, "Builds through the
// coordinator"): the build is placed and reserved through the one planner
// (kind "image-build"), runs on that agent (ImageBuildApi, api/), and is
// recorded per workspace with its status. Concurrent requests for the same
// build in one workspace share one build and see the same events.

import { createHash, randomBytes } from "node:crypto";
import type { BuildEvent, BuildImageRequest, ContainerApi, ImageBuildApi } from "../../api/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { Fanout } from "../../shared/fanout.ts";
import { POOL_NAME_RE } from "../../shared/fleet.ts";
import type { Held } from "../scheduler/index.ts";
import type { ReserveRequest, WaitOptions } from "../scheduler/index.ts";
import type { BuiltImage, BuiltImageRepo } from "./store.ts";
import { dockerfileBuild } from "./dockerfile.ts";
import { buildRequestOf, type ImageSpec, type PipIndex } from "./steps.ts";

/** The reservation kind of a build in the planner. */
export const IMAGE_BUILD_KIND = "image-build";

const GiB = 1024 * 1024 * 1024;

export interface ImageBuildsOptions {
  repo: BuiltImageRepo;
  planner: {
    reserveWithin(r: ReserveRequest, w: WaitOptions): Promise<Held>;
    whenReady(id: string, timeoutMs: number): Promise<void>;
    release(id: string): void;
  };
  agents: { client(agentId: string): ImageBuildApi };
  /** Puts a code archive on an agent (the container manager's pusher): a Dockerfile's context. */
  code?: { ensure(agentId: string, sha256: string, api: ContainerApi): Promise<void> };
  /** Workspace secrets by name (`with_secrets`); fails naming what is missing. */
  secrets?: { resolve(workspaceId: string, names: readonly string[]): Promise<Record<string, string>> };
  /** The package index of every pip step. @default PyPI (pip's own default) */
  pipIndex?: PipIndex;
  /** Conda channels of every micromamba step, after the image's own. @default micromamba's default */
  condaChannels?: string[];
  /** What each build step's container gets. @default 1 core, 2 GiB */
  cpuMillicores?: number;
  memoryBytes?: number;
  /**
   * The cluster registry repository of a workspace's images (workspaceRepository):
   * the building agent pushes there and the record's ref names the pushed image,
   * so every agent can run it. @default none: the image stays on its agent
   */
  pushRepository?: (workspaceId: string) => string;
  /** How long a build waits for room. @default 60000 */
  placementWaitMs?: number;
  log?: { info(o: object, m: string): void; warn(o: object, m: string): void };
  /** Told each status a record takes (building, ready, failed): the coordinator emits image.* events. */
  onStatus?: (image: BuiltImage) => void;
  /**
   * What else remove() removes before the record (the registry's manifest,
   * the agents' copies: ImageGc.forget); a failure fails the removal.
   */
  onRemove?: (image: BuiltImage) => Promise<void>;
  /** The workspace's deployments that run this image (their names); remove() refuses while there are any. */
  usedBy?: (workspaceId: string, image: BuiltImage) => Promise<string[]>;
}

/** A build as a client follows it: the agent's events, then `image` with the record once it is ready. */
export type ImageBuildUpdate =
  | BuildEvent
  /** env: the build's environment (env_vars and a Dockerfile's ENV), for the running function too. */
  | { type: "image"; image: BuiltImage; env: Record<string, string> };

export class ImageBuilds {
  private readonly running = new Map<string, Fanout<ImageBuildUpdate>>();
  /** `workspaceId/imageId` of the records this process has `building` (build-orphans.ts asks). */
  private readonly building = new Set<string>();

  constructor(private readonly o: ImageBuildsOptions) {}

  /** Builds `spec` for the workspace; throws image_build_failed (and records the image failed) when a step fails. */
  build(
    workspaceId: string,
    spec: ImageSpec,
    opts: {
      signal?: AbortSignal;
      baseImageCreds?: Record<string, string>;
      /** from_dockerfile: the Dockerfile's text and its context, uploaded as a code archive. */
      dockerfile?: { text: string; contextSha256: string };
    } = {},
  ): AsyncIterable<ImageBuildUpdate> {
    const df = opts.dockerfile
      ? dockerfileBuild(opts.dockerfile.text, opts.dockerfile.contextSha256)
      : undefined;
    const req = buildRequestOf(spec, { ...this.o.pipIndex, condaChannels: this.o.condaChannels ?? [] }, df);
    if (opts.baseImageCreds && Object.keys(opts.baseImageCreds).length > 0) {
      if (!req.baseImage) throw new BerthError("invalid_request", "base_image_creds need a base_image");
      // Never recorded or logged; part of the request the agent resolves.
      req.baseImageCreds = { ...opts.baseImageCreds };
    }
    req.cpu = (this.o.cpuMillicores ?? 1000) / 1000;
    req.memoryBytes = this.o.memoryBytes ?? 2 * GiB;
    if (this.o.pushRepository) req.pushRepository = this.o.pushRepository(workspaceId);
    const secretNames = [...new Set(spec.secrets ?? [])].sort();
    const pool = buildPool(spec);
    const key = `${workspaceId}:${createHash("sha256").update(JSON.stringify({ req, secretNames, pool })).digest("hex")}`;
    let f = this.running.get(key);
    if (!f) {
      const fan = new Fanout<ImageBuildUpdate>();
      f = fan;
      this.running.set(key, fan);
      void fan
        .run((emit) => this.run(workspaceId, req, secretNames, pool, emit))
        .finally(() => this.running.delete(key));
    }
    return f.follow(opts.signal);
  }

  /** Whether this process runs the build of that record (`workspaceId/imageId`). */
  holds(key: string): boolean {
    return this.building.has(key);
  }

  list(workspaceId: string): Promise<BuiltImage[]> {
    return this.o.repo.list(workspaceId);
  }

  /**
   * Removes the image's record (`berth image rm`): not_found when the workspace has none,
   * conflict naming the deployments that run it, conflict while it builds. Its layers stay
   * on the agent as step cache, which the agent's image GC frees.
   */
  async remove(workspaceId: string, imageId: string): Promise<void> {
    const image = await this.o.repo.get(workspaceId, imageId);
    if (!image) throw new BerthError("not_found", `image ${imageId} not found`, { image_id: imageId });
    if (image.status === "building")
      throw new BerthError("conflict", `image ${imageId} is being built; remove it once the build ends`, {
        image_id: imageId,
      });
    const users = (await this.o.usedBy?.(workspaceId, image)) ?? [];
    if (users.length > 0)
      throw new BerthError(
        "conflict",
        `image ${imageId} is used by the deployment${users.length > 1 ? "s" : ""} ${users.join(", ")}: stop or delete ${users.length > 1 ? "them" : "it"} first`,
        { image_id: imageId, deployments: users },
      );
    await this.o.onRemove?.(image);
    await this.o.repo.delete(workspaceId, imageId);
    this.o.log?.info({ workspaceId, imageId }, "image removed");
  }

  /**
   * The agents that built this definition before (same base, same steps): a rebuild placed there
   * finds every step in its cache and only checks the base digest, where another agent would run
   * every step again. A preference, not a rule: the planner still places on any host with room,
   * and the agent's cache keys (parent digest + step) decide what is really cached.
   */
  private async agentsHoldingSteps(
    workspaceId: string,
    baseImage: string,
    steps: string[],
  ): Promise<string[]> {
    const same = (await this.o.repo.list(workspaceId)).filter(
      (i) =>
        i.status === "ready" &&
        i.baseImage === baseImage &&
        i.steps.length === steps.length &&
        i.steps.every((s, n) => s === steps[n]),
    );
    return [...new Set(same.map((i) => i.agentId))];
  }

  /** Records the image and announces its status; an announcement never fails the build. */
  private async record(image: BuiltImage): Promise<void> {
    await this.o.repo.put(image);
    try {
      this.o.onStatus?.(image);
    } catch (e) {
      this.o.log?.warn({ imageId: image.imageId, err: describeError(e) }, "image status listener failed");
    }
  }

  private async run(
    workspaceId: string,
    req: BuildImageRequest,
    secretNames: string[],
    pool: string | undefined,
    emit: (u: ImageBuildUpdate) => void,
  ): Promise<void> {
    const build: BuildImageRequest = { ...req };
    if (secretNames.length > 0) {
      if (!this.o.secrets)
        throw new BerthError("failed_precondition", "this coordinator has no secrets store for with_secrets");
      // Resolved before anything is reserved, for this build only: the values go to the agent and nowhere else (no record, no log).
      build.secretEnv = await this.o.secrets.resolve(workspaceId, secretNames);
    }
    const stepNames = req.steps.map((s) => s.name);
    const waitMs = this.o.placementWaitMs ?? 60_000;
    const deadline = Date.now() + waitMs;
    for (;;) {
      try {
        return await this.attempt(
          workspaceId,
          req,
          build,
          stepNames,
          Math.max(1, deadline - Date.now()),
          pool,
          emit,
        );
      } catch (e) {
        // The agent refused for room before the build began: this coordinator's view of that host was
        // stale (runners started through other coordinators since its last heartbeat). Place it again
        // once the view has moved, within the same wait, instead of failing the deploy.
        if (!(e instanceof RoomRefusedBeforeStart) || Date.now() + ROOM_RETRY_MS >= deadline)
          throw unwrapRoom(e);
        this.o.log?.info(
          { workspaceId, agentId: e.agentId, err: describeError(e.cause) },
          "image build: the agent had no room, placing it again",
        );
        await new Promise((r) => setTimeout(r, ROOM_RETRY_MS));
      }
    }
  }

  /** One placement of the build and its run; a room refusal before the first event is RoomRefusedBeforeStart. */
  private async attempt(
    workspaceId: string,
    req: BuildImageRequest,
    build: BuildImageRequest,
    stepNames: string[],
    waitMs: number,
    pool: string | undefined,
    emit: (u: ImageBuildUpdate) => void,
  ): Promise<void> {
    const id = `bld-${randomBytes(8).toString("hex")}`;
    const held = await this.o.planner.reserveWithin(
      {
        id,
        kind: IMAGE_BUILD_KIND,
        workspaceId,
        placement: {
          cpuMillicores: this.o.cpuMillicores ?? 1000,
          memoryBytes: req.memoryBytes ?? 2 * GiB,
          // build_with_gpu: a host with that GPU type, or unplaceable naming it.
          gpuTypes: [...(req.gpu?.types ?? [])],
          gpuCount: req.gpu?.count ?? 0,
          preferAgents: await this.agentsHoldingSteps(workspaceId, req.baseImage ?? "", stepNames),
          // Image(pool=...): only that pool's agents build it; one no agent is in is unplaceable.
          ...(pool ? { pool } : {}),
        },
      },
      { waitMs, what: "the image build" },
    );
    let record: BuiltImage | undefined;
    let started = false;
    try {
      await this.o.planner.whenReady(id, waitMs);
      const agent = this.o.agents.client(held.agentId);
      // The type the planner chose on that host, so the agent gives its steps that GPU.
      if (build.gpu && held.gpuType) build = { ...build, gpu: { ...build.gpu, types: [held.gpuType] } };
      const contexts = new Set(build.steps.flatMap((s) => (s.code ? [s.code.sha256] : [])));
      for (const sha of contexts) {
        if (!this.o.code)
          throw new BerthError(
            "failed_precondition",
            "this coordinator cannot put a build context on an agent",
          );
        await this.o.code.ensure(held.agentId, sha, agent as unknown as ContainerApi);
      }
      for await (const e of agent.buildImage(build)) {
        started = true;
        if (e.type === "base") {
          const now = new Date().toISOString();
          record = {
            workspaceId,
            imageId: e.imageId,
            status: "building",
            baseImage: req.baseImage ?? "",
            baseDigest: e.digest,
            agentId: held.agentId,
            ref: "",
            digest: "",
            steps: stepNames,
            error: "",
            createdAt: (await this.o.repo.get(workspaceId, e.imageId))?.createdAt ?? now,
            updatedAt: now,
          };
          this.building.add(buildingKey(record));
          await this.record(record);
        }
        emit(e);
        if (e.type === "done" && record) {
          record = {
            ...record,
            status: "ready",
            // The cluster registry's reference when pushed: every agent pulls it from there.
            ref: e.pushedRef ?? e.ref,
            digest: e.digest,
            updatedAt: new Date().toISOString(),
          };
          await this.record(record);
          this.o.log?.info({ workspaceId, imageId: e.imageId, agentId: held.agentId }, "image built");
          emit({ type: "image", image: record, env: { ...(req.env ?? {}) } });
        }
      }
    } catch (e) {
      if (!started && e instanceof BerthError && e.code === "resource_exhausted")
        throw new RoomRefusedBeforeStart(held.agentId, e);
      if (record) {
        const failed: BuiltImage = {
          ...record,
          status: "failed",
          error: describeError(e),
          updatedAt: new Date().toISOString(),
        };
        await this.record(failed).catch(() => {});
      }
      this.o.log?.warn(
        { workspaceId, imageId: record?.imageId, err: describeError(e) },
        "image build failed",
      );
      throw e;
    } finally {
      if (record) this.building.delete(buildingKey(record));
      this.o.planner.release(id);
    }
  }
}

/** Between placing a build again after an agent refused it for room (about a heartbeat). */
const ROOM_RETRY_MS = 1000;

/** An agent refused the build for room before it began: nothing was built or recorded, so it can be placed again. */
class RoomRefusedBeforeStart extends Error {
  constructor(
    readonly agentId: string,
    override readonly cause: BerthError,
  ) {
    super(cause.message);
  }
}

const unwrapRoom = (e: unknown): unknown => (e instanceof RoomRefusedBeforeStart ? e.cause : e);

/** The key of a build record among the coordinators (ClusterClaims ids). */
export const buildingKey = (i: Pick<BuiltImage, "workspaceId" | "imageId">): string =>
  `${i.workspaceId}/${i.imageId}`;

/** `Image(pool=...)`: the pool whose agents build it; invalid_request for a name no pool can have. */
function buildPool(spec: ImageSpec): string | undefined {
  if (spec.pool === undefined || spec.pool === null || spec.pool === "") return undefined;
  if (typeof spec.pool !== "string" || !POOL_NAME_RE.test(spec.pool))
    throw new BerthError(
      "invalid_request",
      `pool ${JSON.stringify(spec.pool)} is not a pool name (1-63 characters [a-z0-9_-])`,
      { field: "pool" },
    );
  return spec.pool;
}
