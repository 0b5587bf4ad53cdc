// Pull ahead (docs/images.md, "Pull ahead"): when a deployment is made or
// started, the agents the planner would pick for its first containers pull
// its image at once, so that the first request waits for a container start,
// not for a download of many gigabytes. A pull that fails is only logged: the
// container's own start pulls again and reports the error where it matters.

import type { Logger } from "pino";
import type { ContainerApi, ImageSummary } from "../../api/index.ts";
import { describeError } from "../../shared/errors.ts";
import type { FleetView } from "../fleet/index.ts";
import { buildClusterView, type Held, likelyAgents } from "../scheduler/index.ts";
import { placementRequest } from "./runner-request.ts";
import type { DeploymentStates, StubRecord, StubSource } from "./types.ts";

/** How many hosts pull a new deployment's image ahead: its first container's and one more. */
export const PULL_AHEAD_HOSTS = 2;

export interface PullAheadDeps {
  fleet: Pick<FleetView, "ready">;
  /** The planner's reservations: hosts already full are not picked. */
  reservations: () => Held[];
  stubs: StubSource;
  deployments: DeploymentStates;
  agents: { client(agentId: string): Pick<ContainerApi, "pullImage"> };
  log: Pick<Logger, "info" | "warn">;
  /** @default PULL_AHEAD_HOSTS */
  hosts?: number;
}

export class PullAhead {
  private readonly pulling = new Map<string, Promise<ImageSummary>>();

  constructor(private readonly d: PullAheadDeps) {}

  /**
   * A deployment's stub changed: when it is active and names an image, the
   * agents likely to run it start pulling it. Returns their ids (none for
   * the agent's default image, a stopped deployment or a stub of no deployment).
   */
  async stubChanged(stubId: string): Promise<string[]> {
    if (!this.d.deployments.of(stubId)?.active) return [];
    const stub = await this.d.stubs.get(stubId);
    return stub ? this.forStub(stub) : [];
  }

  /** Starts pulls of `stub`'s image on the agents place() would pick for its next containers. */
  forStub(stub: StubRecord): string[] {
    const ref = stub.extra.image_ref;
    if (!ref) return [];
    const view = buildClusterView(this.d.fleet.ready(), this.d.reservations());
    const agents = likelyAgents(view, placementRequest(stub, []), this.d.hosts ?? PULL_AHEAD_HOSTS);
    for (const agentId of agents) this.pullAhead(agentId, ref);
    return agents;
  }

  /** Resolves once every pull started so far has ended (tests; shutdown). */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.pulling.values()]);
  }

  /**
   * Pulls `ref` onto one agent (`berth image pull`): the image's summary
   * there, or the agent's error. Joins a pull ahead of the same image on
   * that agent already running, as a pull ahead joins this one.
   */
  pullOn(agentId: string, ref: string): Promise<ImageSummary> {
    return this.pull(agentId, ref);
  }

  /** Starts a pull ahead whose outcome is only logged. */
  private pullAhead(agentId: string, ref: string): void {
    const started = Date.now();
    this.pull(agentId, ref).then(
      () => this.d.log.info({ agentId, image: ref, ms: Date.now() - started }, "pulled ahead"),
      (e) => this.d.log.warn({ agentId, image: ref, err: describeError(e) }, "pull ahead failed"),
    );
  }

  /** One pull of `ref` per agent at a time: a second ask while it runs joins it. */
  private pull(agentId: string, ref: string): Promise<ImageSummary> {
    const key = `${agentId}\n${ref}`;
    const running = this.pulling.get(key);
    if (running) return running;
    const done = this.d.agents
      .client(agentId)
      .pullImage(ref)
      .finally(() => this.pulling.delete(key));
    this.pulling.set(key, done);
    return done;
  }
}
