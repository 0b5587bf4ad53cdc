// The `deployment` member kind: a version of a named deployment, made by the
// deployment service exactly as `berth deploy` makes one (docs/stacks.md).
//
// The stack holds one container of the new version while it waits (its
// min_containers may be 0): a member nobody has called yet would otherwise
// never start one. Ready: an endpoint, asgi or realtime container answers
// GET /.berth/health with 200 (its handler imported and on_start ran); a
// container of the other kinds has stayed running `settleMs`. Failed: the
// health answer is the runner's load error, or a start of its container
// failed (the container manager's start error: an image that does not pull,
// an entrypoint that exits). Rollback: the new version is stopped (its record
// stays, named in the failed attempt) and the previous version is started
// again if it had been stopped, so `/endpoint/{name}` reaches the previous
// version.

import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import type { ManagedContainerInfo } from "../containers/index.ts";
import { checkDeployment } from "../deployments/index.ts";
import type { DeploymentService } from "../deployments/index.ts";
import type { HealthAnswer } from "./health-probe.ts";
import type { MemberKind, MemberOutcome, MemberSpec, Readiness } from "./members.ts";

/** What readiness reads of the container manager. */
export interface MemberContainers {
  containersOf(stubId: string): Pick<ManagedContainerInfo, "id" | "agentId" | "state" | "since">[];
  startError(stubId: string): string | undefined;
}

/** Direct-served kinds: their runner answers GET /.berth/health (coordinator/stacks/health-probe.ts). */
const PROBED: ReadonlySet<string> = new Set(["endpoint", "asgi", "realtime"]);

export interface DeploymentMemberSpec extends MemberSpec {
  kind: "deployment";
  /** The deployment kind: endpoint, asgi, realtime, taskqueue, schedule, function or pod. */
  type: string;
  config: StubConfig;
  extra: StubExtra;
}

export interface DeploymentMemberDeps {
  deployments: Pick<DeploymentService, "deploy" | "get" | "stop" | "start" | "holdContainer">;
  containers: MemberContainers;
  /** Asks a running container of an endpoint, asgi or realtime member whether its handler loaded. */
  probe: (c: { agentId: string; containerId: string }) => Promise<HealthAnswer>;
  /** How long a container of the other kinds must stay running to count as ready. @default 5000 */
  settleMs?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

export class DeploymentMembers implements MemberKind {
  readonly kind = "deployment";
  readonly order = 1;
  private readonly settleMs: number;
  private readonly clock: () => number;

  constructor(private readonly d: DeploymentMemberDeps) {
    this.settleMs = d.settleMs ?? 5000;
    this.clock = d.clock ?? Date.now;
  }

  check(spec: MemberSpec): void {
    const s = spec as Partial<DeploymentMemberSpec>;
    if (typeof s.type !== "string") throw invalid("type (the deployment kind, e.g. endpoint) is missing");
    if (!isObject(s.config))
      throw invalid("config (the stub config berth.client.describe writes) is missing");
    if (!isObject(s.extra)) throw invalid("extra (the stub extra berth.client.describe writes) is missing");
    checkDeployment({ name: s.name as string, kind: s.type, config: s.config, extra: s.extra });
  }

  async apply(workspaceId: string, spec: MemberSpec): Promise<{ ref: string; version: number | null }> {
    const s = spec as DeploymentMemberSpec;
    const dep = await this.d.deployments.deploy(workspaceId, {
      name: s.name,
      kind: s.type,
      config: s.config,
      extra: s.extra,
    });
    this.d.deployments.holdContainer(dep, true);
    return { ref: dep.id, version: dep.version };
  }

  async readiness(workspaceId: string, o: MemberOutcome): Promise<Readiness> {
    const dep = await this.d.deployments.get(workspaceId, o.ref as string);
    if (!dep.active)
      return { ready: false, failed: `deployment ${dep.name} v${dep.version} was stopped meanwhile` };
    const error = this.d.containers.startError(dep.stubId);
    if (error) return { ready: false, failed: `its container does not start: ${error}` };
    const running = this.d.containers.containersOf(dep.stubId).filter((c) => c.state === "running");
    if (PROBED.has(dep.kind)) {
      for (const c of running) {
        const answer = await this.d.probe({ agentId: c.agentId, containerId: c.id });
        if (answer?.healthy) return { ready: true };
        if (answer) return { ready: false, failed: `its handler does not load: ${answer.error}` };
      }
      return { ready: false };
    }
    const now = this.clock();
    const up = running.some((c) => now - c.since >= this.settleMs);
    return up ? { ready: true } : { ready: false };
  }

  async settle(workspaceId: string, o: MemberOutcome): Promise<void> {
    if (!o.ref) return;
    const dep = await this.d.deployments.get(workspaceId, o.ref).catch(() => undefined);
    if (dep) this.d.deployments.holdContainer(dep, false);
  }

  async rollback(workspaceId: string, o: MemberOutcome): Promise<void> {
    const notes: string[] = [];
    if (o.ref) await this.d.deployments.stop(workspaceId, o.ref).catch((e) => notNotFound(e, notes, "stop"));
    if (o.previous)
      await this.d.deployments
        .start(workspaceId, o.previous.ref)
        .catch((e) => notNotFound(e, notes, `start the previous version ${o.previous?.version}`));
    if (notes.length > 0) o.reason = [o.reason, ...notes].filter(Boolean).join("; ");
  }

  async retire(workspaceId: string, o: MemberOutcome): Promise<void> {
    if (!o.ref) return;
    await this.d.deployments.stop(workspaceId, o.ref).catch((e) => {
      if (!(e instanceof BerthError && e.code === "not_found")) throw e;
    });
  }
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** A deployment deleted by hand meanwhile has nothing to stop or start: noted, not fatal. */
function notNotFound(e: unknown, notes: string[], what: string): void {
  if (e instanceof BerthError && e.code === "not_found") notes.push(`cannot ${what}: it was deleted`);
  else notes.push(`cannot ${what}: ${describeError(e)}`);
}
