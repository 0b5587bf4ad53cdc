// Starting a sandbox's or pod's container (docs/sandboxes.md): the planner
// places it (waiting, bounded, for room), its record is written, the stub's
// code and secrets reach the chosen agent, and the container runs; a start
// that fails leaves neither a reservation, a running record nor a container.

import { randomBytes } from "node:crypto";
import type { ContainerStatus, RunContainerRequest } from "../../api/index.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { CodePusher } from "../containers/index.ts";
import { applyWorkspaceRuntime, placementRequest } from "../containers/index.ts";
import type { StubRecord } from "../containers/index.ts";
import type { SandboxKind, SandboxRecord } from "./store.ts";
import { stubBucketMounts } from "../volumes/index.ts";
import { type PodSettled, podStayedUp } from "./pod-settle.ts";
import { sandboxRequest, terminatedError } from "./request.ts";
import type { ResolvedSandboxServiceOptions, SandboxAgentApi } from "./types.ts";
import { type SandboxUpkeep, exitReason } from "./upkeep.ts";

const iso = (ms: number) => new Date(ms).toISOString();

export interface StartPlan {
  stub: StubRecord;
  kind: SandboxKind;
  egress: EgressPolicy;
  ports: number[];
  ttlSeconds: number;
  /** The agent that must run it (it holds the snapshot). */
  agentId?: string;
  image?: string;
  imageId: string | null;
  entrypoint?: string[];
  /** The API token whose request starts it (usage per member, docs/usage.md). */
  tokenId?: string | null;
  run(api: SandboxAgentApi, req: RunContainerRequest): Promise<ContainerStatus>;
}

export class SandboxStarter {
  private readonly code: CodePusher;

  constructor(
    private readonly o: ResolvedSandboxServiceOptions,
    /** Containers whose start is in flight (shared with upkeep, which leaves them alone). */
    private readonly starting: Set<string>,
    private readonly upkeep: Pick<SandboxUpkeep, "removeOnAgent">,
  ) {
    this.code = new CodePusher(o.code);
  }

  /**
   * Places, records and starts the plan's container; its record once it runs
   * (a pod: once it stayed up, or once its entrypoint finished with exit code 0).
   */
  async start(p: StartPlan): Promise<SandboxRecord> {
    const { o } = this;
    const { stub } = p;
    // Refused before anything is placed (a pod without an entrypoint).
    sandboxRequest({ ...p, containerId: "ctr-check", gpuType: undefined, image: p.image });
    const req = placementRequest(stub, p.agentId ? [p.agentId] : []);
    const agents = o.fleet.list().filter((a) => !p.agentId || a.agentId === p.agentId);
    if (p.agentId && !agents.some((a) => a.state === "ready"))
      throw new BerthError(
        "unavailable",
        `agent ${p.agentId}, which holds the snapshot this sandbox starts from, is not ready`,
        { agent_id: p.agentId },
      );
    const limits = o.limits ? await o.limits(stub.workspaceId) : undefined;
    await o.budgets?.(stub.workspaceId, { gpus: req.gpuCount > 0 });
    const id = `ctr-${randomBytes(8).toString("hex")}`;
    // The planner checks the limits and the room together, stops idle warm
    // containers when they hold what is missing, and waits (bounded) when
    // nothing can be freed; concurrent creates see each other's room.
    // Upkeep leaves a reservation alone while its start is in flight (it may wait for room).
    this.starting.add(id);
    const reservation = await o.planner
      .reserveWithin(
        {
          id,
          kind: p.kind,
          workspaceId: stub.workspaceId,
          stubId: stub.id,
          placement: req,
          // A higher-priority sandbox or pod may preempt preemptible runner containers (docs/gpus.md).
          ...(stub.extra.priority ? { priority: stub.extra.priority } : {}),
          ...(limits ? { limits } : {}),
          ...(p.agentId ? { onlyAgents: [p.agentId] } : {}),
        },
        {
          waitMs: o.placementWaitMs,
          what: `the ${p.kind}`,
          onWait: (reason) => {
            o.log.info(
              { stubId: stub.id, kind: p.kind, reason, waitMs: o.placementWaitMs },
              `a ${p.kind} waits for room: ${reason}`,
            );
            o.onWaiting?.({
              workspaceId: stub.workspaceId,
              stubId: stub.id,
              kind: p.kind,
              reason,
              waitMs: o.placementWaitMs,
            });
          },
        },
      )
      .catch((e: unknown) => {
        this.starting.delete(id);
        throw e;
      });
    const placed = { agentId: reservation.agentId, gpuType: reservation.gpuType };
    const log = o.log.child({ sandboxId: id, stubId: stub.id, agentId: placed.agentId, kind: p.kind });
    try {
      await o.repo.insert({
        id,
        workspaceId: stub.workspaceId,
        stubId: stub.id,
        agentId: placed.agentId,
        kind: p.kind,
        ttlSeconds: p.ttlSeconds,
        ports: p.ports,
        egress: p.egress,
        imageId: p.imageId,
        at: iso(o.clock()),
        tokenId: p.tokenId ?? null,
      });
    } catch (e) {
      o.planner.release(id);
      this.starting.delete(id);
      throw e;
    }
    try {
      const api = o.agents.client(placed.agentId);
      const secretEnv = await this.secretEnv(stub);
      // Keys of the stub's CloudBuckets, from the secrets the config names (docs/buckets.md).
      const buckets = await stubBucketMounts(stub, o.secrets);
      if (stub.extra.code_sha256) await this.code.ensure(placed.agentId, stub.extra.code_sha256, api);
      const req = sandboxRequest({
        ...p,
        containerId: id,
        gpuType: placed.gpuType,
        image: p.image,
        ...(secretEnv ? { secretEnv } : {}),
      });
      // The workspace's operator may force gVisor on every container of it, or
      // opt it out of the user namespace or the system call allow list (docs/limits.md).
      applyWorkspaceRuntime(req, limits);
      if (buckets.length > 0) req.buckets = buckets;
      const status = await p.run(api, req);
      o.planner.assignGpus(id, status.gpus);
      let settled: PodSettled = "up";
      if (!(await o.repo.markRunning(id))) {
        // Ended meanwhile: a pod whose entrypoint exited 0 at once ran; else it exited or a terminate came first.
        const s = await o.repo.get(id);
        if (p.kind !== "pod" || s?.exitCode !== 0) throw terminatedError(id, s?.terminatedReason);
        settled = "finished";
      }
      log.info(`${p.kind} started`);
      if (p.kind === "pod" && settled === "up")
        settled = await podStayedUp(api, id, o.podSettleMs, () => o.repo.get(id));
      if (settled === "finished") {
        // Its room is free and its container goes; the record keeps its exit code.
        o.planner.release(id);
        await o.repo.markTerminated(id, iso(o.clock()), exitReason(0, undefined), 0);
        await this.upkeep.removeOnAgent(placed.agentId, id, 0);
        log.info("pod finished: its entrypoint exited 0");
      }
    } catch (e) {
      o.planner.release(id);
      const code = e instanceof BerthError ? e.details?.exit_code : undefined;
      await o.repo
        .markTerminated(
          id,
          iso(o.clock()),
          `start failed: ${describeError(e)}`,
          typeof code === "number" ? code : undefined,
        )
        .catch(() => {});
      await this.upkeep.removeOnAgent(placed.agentId, id, 0);
      log.warn({ err: e }, `cannot start the ${p.kind}: ${describeError(e)}`);
      throw e;
    } finally {
      this.starting.delete(id);
    }
    return (await o.repo.get(id)) as SandboxRecord;
  }

  private async secretEnv(stub: StubRecord): Promise<Record<string, string> | undefined> {
    const names = stub.extra.secrets ?? [];
    if (names.length === 0) return undefined;
    if (!this.o.secrets)
      throw new BerthError(
        "failed_precondition",
        `the stub needs secrets ${names.join(", ")} but this coordinator has no secret store`,
      );
    return this.o.secrets.resolve(stub.workspaceId, names);
  }
}
