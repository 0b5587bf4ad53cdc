// The autoscaler's decisions, per deployment: the last few are kept in memory
// for GET /api/v1/deployment/{ws}/{id}, each is logged and published on core
// NATS (not stored: a watcher sees what happens while it listens).

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";

/** One change of a deployment's container target. */
export interface ScalingEvent {
  stubId: string;
  workspaceId: string;
  /** ms since epoch, or an ISO 8601 time. */
  at: number | string | Date;
  from: number;
  to: number;
  reason: string;
  queueDepth: number;
}

export interface ScalingEventJson {
  at: string;
  stub_id: string;
  from: number;
  to: number;
  reason: string;
  queue_depth: number;
}

/** Events kept per deployment. */
export const KEPT_SCALING_EVENTS = 50;

export const autoscalerSubject = (workspaceId: string) => `berth.events.${workspaceId}.autoscaler`;

export class ScalingEvents {
  private readonly byDeployment = new Map<string, ScalingEventJson[]>();
  private readonly enc = new TextEncoder();

  constructor(
    private readonly log: Logger,
    private readonly nats?: NatsConnection,
  ) {}

  /** `deploymentId` undefined: the stub is no deployment's; the event is only logged and published. */
  record(deploymentId: string | undefined, ev: ScalingEvent): void {
    const json: ScalingEventJson = {
      at: new Date(ev.at).toISOString(),
      stub_id: ev.stubId,
      from: ev.from,
      to: ev.to,
      reason: ev.reason,
      queue_depth: ev.queueDepth,
    };
    if (deploymentId) {
      const list = this.byDeployment.get(deploymentId) ?? [];
      list.push(json);
      if (list.length > KEPT_SCALING_EVENTS) list.splice(0, list.length - KEPT_SCALING_EVENTS);
      this.byDeployment.set(deploymentId, list);
    }
    // The container manager logs each decision at info already.
    this.log.debug(
      { deploymentId, workspaceId: ev.workspaceId, ...json },
      `autoscaler: containers ${ev.from} -> ${ev.to} (${ev.reason})`,
    );
    if (!this.nats) return;
    try {
      const message = {
        type: "autoscaler",
        workspace_id: ev.workspaceId,
        deployment_id: deploymentId ?? null,
        ...json,
      };
      this.nats.publish(autoscalerSubject(ev.workspaceId), this.enc.encode(JSON.stringify(message)));
    } catch (e) {
      // A closed or draining connection: the event is still kept and logged.
      this.log.debug({ err: describeError(e) }, "autoscaler: cannot publish a scaling event");
    }
  }

  of(deploymentId: string): ScalingEventJson[] {
    return [...(this.byDeployment.get(deploymentId) ?? [])];
  }

  forget(deploymentId: string): void {
    this.byDeployment.delete(deploymentId);
  }
}
