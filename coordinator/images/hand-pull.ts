// `berth image pull IMAGE [--pool NAME]` (docs/images.md, "Pull ahead"): the
// image goes onto every ready agent of a pool (or of the whole fleet) now,
// through the same per-agent pulls a deployment's pull ahead makes, so an
// operator can warm a pool before a launch. IMAGE is one of the workspace's
// built images (img-...) or a reference; a reference into the cluster
// registry must be the workspace's own repository there (the agents pull
// from it with the cluster's credentials, which every workspace shares).

import type { ImageSummary } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { DEFAULT_POOL, type Heartbeat, POOL_NAME_RE, poolOf } from "../../shared/fleet.ts";
import { workspaceRepository } from "./gc.ts";
import type { BuiltImageRepo } from "./store.ts";

export interface HandPullDeps {
  repo: Pick<BuiltImageRepo, "get">;
  /** The fleet's ready agents. */
  ready(): { agentId: string; heartbeat: Pick<Heartbeat, "pool" | "proxyAddress"> }[];
  /** One agent's pull of `ref` (PullAhead.pullOn): joins one already running there. */
  pullOn(agentId: string, ref: string): Promise<ImageSummary>;
  /** The cluster registry's host (`host:port`), when the cluster has one. */
  registryHost?: string;
}

/** One agent's outcome. */
export type AgentPull =
  | { agentId: string; ok: true; image: ImageSummary; ms: number }
  | { agentId: string; ok: false; error: unknown; ms: number };

export interface HandPull {
  /** What the agents pull. */
  ref: string;
  /** The agents pulling it, with their pools. */
  agents: { agentId: string; pool: string }[];
  /** Each agent's outcome as it ends, in that order. */
  outcomes: AsyncIterable<AgentPull>;
}

/** The agents' step cache: local to the agent that built each step, of whatever workspace. */
const STEP_CACHE = /^localhost\/berth-build-cache[:@/]/;

export class HandPulls {
  constructor(private readonly d: HandPullDeps) {}

  /**
   * Resolves `image` for `workspaceId` and starts its pull on every ready
   * agent of `pool` (all of them without one). Refuses before any pull: an
   * image the workspace does not have (not_found), a name no pool can have
   * (invalid_request), a pool no ready agent is in (unplaceable, naming the
   * pools there are), no ready agent at all (unavailable).
   */
  async start(workspaceId: string, image: string, pool?: string): Promise<HandPull> {
    const ref = await this.resolve(workspaceId, image);
    if (pool !== undefined && !POOL_NAME_RE.test(pool))
      throw new BerthError(
        "invalid_request",
        `pool ${JSON.stringify(pool)} is not a pool name (1-63 characters [a-z0-9_-])`,
        { field: "pool" },
      );
    const ready = this.d.ready().map((a) => ({ agentId: a.agentId, pool: poolOf(a.heartbeat) }));
    if (ready.length === 0) throw new BerthError("unavailable", "no agent is ready to pull an image");
    const agents = pool === undefined ? ready : ready.filter((a) => a.pool === pool);
    if (agents.length === 0) {
      const pools = [...new Set(ready.map((a) => a.pool ?? DEFAULT_POOL))].sort();
      throw new BerthError(
        "unplaceable",
        `cannot pull ${image}: no agent is in pool ${JSON.stringify(pool)} (the fleet has pools: ${pools.join(", ")})`,
        { pool, pools },
      );
    }
    return { ref, agents, outcomes: this.outcomes(agents, ref) };
  }

  /** Every agent's pull started at once; outcomes yielded as each ends. */
  private async *outcomes(agents: { agentId: string }[], ref: string): AsyncGenerator<AgentPull> {
    const started = Date.now();
    const pending = new Map<string, Promise<AgentPull>>();
    for (const { agentId } of agents) {
      const p = this.d.pullOn(agentId, ref).then(
        (image): AgentPull => ({ agentId, ok: true, image, ms: Date.now() - started }),
        (error: unknown): AgentPull => ({ agentId, ok: false, error, ms: Date.now() - started }),
      );
      pending.set(agentId, p);
    }
    while (pending.size > 0) {
      const next = await Promise.race(pending.values());
      pending.delete(next.agentId);
      yield next;
    }
  }

  /** The reference the agents pull: a built image's, or `image` itself once it is the workspace's to pull. */
  private async resolve(workspaceId: string, image: string): Promise<string> {
    const notFound = () => new BerthError("not_found", `image ${image} not found`, { image });
    if (/^img-[0-9a-z]+$/.test(image)) {
      const built = await this.d.repo.get(workspaceId, image);
      if (!built) throw notFound();
      if (built.status !== "ready" || !built.ref)
        throw new BerthError(
          "failed_precondition",
          `image ${image} is ${built.status}: only a ready image can be pulled`,
          { image, status: built.status },
        );
      return built.ref;
    }
    if (!/^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$/.test(image) || image.length > 1024)
      throw new BerthError("invalid_request", `${JSON.stringify(image)} is not an image reference`, {
        field: "image",
      });
    if (STEP_CACHE.test(image)) throw notFound();
    const host = this.d.registryHost;
    if (host && image.startsWith(`${host}/`)) {
      const repository = image.slice(host.length + 1).split(/[:@]/)[0];
      if (repository !== workspaceRepository(workspaceId)) throw notFound();
    }
    return image;
  }
}
