// Each stub's container target, so a change of it (not every reconcile) is
// one scaling event: logged, and handed to the manager's onScale.

import type { Logger } from "pino";
import type { StopReason } from "./autoscale.ts";
import type { ScaleEvent } from "./types.ts";

/** Why a stub's target is what it is, for its scaling event. */
export function scaleReason(
  stops: StopReason[],
  draining: boolean,
  demand: { pending: number; running: number },
  baseline: number,
): string {
  if (draining) return "deployment stopped";
  if (stops.includes("idle past keep_warm_seconds")) return "idle past keep_warm_seconds";
  if (stops.includes("config changed")) return "config changed";
  if (demand.pending + demand.running === 0 && baseline > 0) return "min_containers";
  return `queue depth: ${demand.pending} waiting, ${demand.running} running`;
}

interface Target {
  workspaceId: string;
  count: number;
}

export class ScaleTargets {
  private readonly byStub = new Map<string, Target>();

  constructor(
    private readonly log: Logger,
    private readonly onScale: ((ev: ScaleEvent) => void) | undefined,
  ) {}

  /** Stubs with a target above zero (reconciled until it reaches zero). */
  stubIds(): string[] {
    return [...this.byStub.keys()];
  }

  workspaceOf(stubId: string): string | undefined {
    return this.byStub.get(stubId)?.workspaceId;
  }

  /** Records the stub's target; a change is an event. A target of 0 is forgotten after its event. */
  note(
    stub: { id: string; workspaceId: string },
    to: number,
    at: number,
    reason: string,
    queueDepth: number,
  ): void {
    const from = this.byStub.get(stub.id)?.count ?? 0;
    if (to === 0) this.byStub.delete(stub.id);
    else this.byStub.set(stub.id, { workspaceId: stub.workspaceId, count: to });
    if (to === from) return;
    const ev: ScaleEvent = {
      stubId: stub.id,
      workspaceId: stub.workspaceId,
      at,
      from,
      to,
      reason,
      queueDepth,
    };
    this.log.info(ev, `scaling stub ${stub.id} from ${from} to ${to} containers: ${reason}`);
    try {
      this.onScale?.(ev);
    } catch (err) {
      this.log.warn({ err, stubId: stub.id }, "a scaling event listener failed");
    }
  }
}
