// The cluster registry's side of built images (docs/images.md, "The cluster
// registry" and "Garbage collection"): where a workspace's images are pushed,
// and the sweep that removes images no deployment uses and nobody has asked
// for in `afterMs`: every ready agent is told to drop its copy, the manifest
// is deleted from the registry, and the record goes. An image a container
// still runs from is kept; a failed part is logged; both are tried again on
// the next sweep (the record goes last, so the image is still found then).

import type { ContainerApi } from "../../api/index.ts";
import { BerthError, describeError, isBerthError } from "../../shared/errors.ts";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import { parseRegistryUrl, RegistryClient } from "../../shared/registry-client.ts";
import { fetchTrusting } from "../../shared/tls-fetch.ts";
import type { BuiltImage } from "./store.ts";

export const IMAGE_GC_AFTER_DEFAULT_MS = 7 * 24 * 3600_000;

/** The repository a workspace's built images are pushed to, one tag per image id. */
export function workspaceRepository(workspaceId: string): string {
  const slug = workspaceId
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  return `berth/${slug || "workspace"}`;
}

export function checkClusterRegistry(r: unknown): ClusterRegistryAccess {
  const v = (typeof r === "object" && r !== null ? r : {}) as Partial<
    Record<keyof ClusterRegistryAccess, unknown>
  >;
  if (typeof v.url !== "string")
    throw new BerthError("invalid_request", "coordinator config: registry.url is required");
  try {
    parseRegistryUrl(v.url);
  } catch (e) {
    throw new BerthError("invalid_request", `coordinator config: ${describeError(e)}`);
  }
  if (typeof v.username !== "string" || typeof v.password !== "string")
    throw new BerthError(
      "invalid_request",
      "coordinator config: registry.username and registry.password must be strings (empty for a registry without auth)",
    );
  if (v.caPem !== undefined && (typeof v.caPem !== "string" || !v.caPem.includes("BEGIN CERTIFICATE")))
    throw new BerthError("invalid_request", "coordinator config: registry.caPem must be a PEM certificate");
  return {
    url: v.url,
    username: v.username,
    password: v.password,
    ...(v.caPem ? { caPem: v.caPem } : {}),
  };
}

export function checkImageGcAfter(v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 1000)
    throw new BerthError(
      "invalid_request",
      `coordinator config: imageGcAfterMs ${JSON.stringify(v)} must be a number of milliseconds of at least 1000`,
    );
  return v;
}

export interface ImageGcOptions {
  repo: {
    listAll(): Promise<BuiltImage[]>;
    delete(workspaceId: string, imageId: string): Promise<boolean>;
  };
  /** The names of the deployments running the image (deploymentsUsingImage). */
  usedBy: (workspaceId: string, image: BuiltImage) => Promise<string[]>;
  /** Ready agents and a client of each. */
  agents: { readyIds(): string[]; client(agentId: string): Pick<ContainerApi, "removeImage"> };
  registry?: ClusterRegistryAccess;
  /** Images untouched (no build request) this long, and in no deployment, go. */
  afterMs: number;
  now?: () => number;
  log?: { info(o: object, m: string): void; warn(o: object, m: string): void };
}

export class ImageGc {
  private readonly registry: RegistryClient | undefined;
  private readonly registryHost: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;

  constructor(private readonly o: ImageGcOptions) {
    if (o.registry) {
      const { host, insecure } = parseRegistryUrl(o.registry.url);
      this.registryHost = host;
      this.registry = new RegistryClient(
        {
          host,
          insecure,
          ...(o.registry.username
            ? { credentials: { username: o.registry.username, password: o.registry.password } }
            : {}),
        },
        fetchTrusting(o.registry.caPem),
      );
    }
  }

  /** One pass; the image ids removed. */
  async sweep(): Promise<string[]> {
    const cutoff = (this.o.now ?? Date.now)() - this.o.afterMs;
    const removed: string[] = [];
    for (const image of await this.o.repo.listAll()) {
      if (image.status === "building" || Date.parse(image.updatedAt) > cutoff) continue;
      try {
        if ((await this.o.usedBy(image.workspaceId, image)).length > 0) continue;
        if (await this.removeEverywhere(image)) removed.push(image.imageId);
      } catch (e) {
        this.o.log?.warn(
          { imageId: image.imageId, err: describeError(e) },
          "image GC: removing an image failed",
        );
      }
    }
    return removed;
  }

  /**
   * Agents first: one whose container runs from the image refuses (conflict),
   * and then the image is in use, so it stays (record and manifest) until a
   * later sweep. Then the manifest, then the record.
   */
  private async removeEverywhere(image: BuiltImage): Promise<boolean> {
    if (!(await this.dropFromAgents(image, true))) return false;
    await this.deleteManifest(image);
    await this.o.repo.delete(image.workspaceId, image.imageId);
    this.o.log?.info({ workspaceId: image.workspaceId, imageId: image.imageId }, "image GC: image removed");
    return true;
  }

  /**
   * What `berth image rm` does beyond the record (ImageBuilds' onRemove): the
   * manifest leaves the registry and the agents drop their copies; an agent
   * where a container still runs from it keeps it for its own GC.
   */
  async forget(image: BuiltImage): Promise<void> {
    await this.dropFromAgents(image, false);
    await this.deleteManifest(image);
  }

  /** removeImage by digest on every ready agent: the image goes whatever it is tagged as. False: in use somewhere (with stopAtInUse). */
  private async dropFromAgents(image: BuiltImage, stopAtInUse: boolean): Promise<boolean> {
    if (!image.digest) return true;
    for (const agentId of this.o.agents.readyIds()) {
      try {
        await this.o.agents.client(agentId).removeImage(image.digest);
      } catch (e) {
        if (isBerthError(e) && e.code === "not_found") continue; // that agent never had it
        if (isBerthError(e) && e.code === "conflict") {
          if (stopAtInUse) return false; // a container runs from it
          this.o.log?.info(
            { imageId: image.imageId, agentId },
            "image in use on an agent; its own GC removes it later",
          );
          continue;
        }
        throw e;
      }
    }
    return true;
  }

  private async deleteManifest(image: BuiltImage): Promise<void> {
    const host = this.registryHost;
    if (!host || !this.registry || !image.ref.startsWith(`${host}/`)) return;
    const [repository, digest] = image.ref.slice(host.length + 1).split("@");
    if (repository && digest) await this.registry.deleteManifest(repository, digest);
  }

  /** Sweeps every `intervalMs` (one pass at a time) until stop(). */
  start(intervalMs: number): void {
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.sweep()
        .catch((e: unknown) => this.o.log?.warn({ err: describeError(e) }, "image GC failed"))
        .finally(() => {
          this.running = undefined;
        });
    }, intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}

/** How often the sweep runs: a quarter of the GC age, between 1 s and 1 hour. */
export function imageGcIntervalMs(afterMs: number): number {
  return Math.min(3600_000, Math.max(1000, Math.floor(afterMs / 4)));
}
