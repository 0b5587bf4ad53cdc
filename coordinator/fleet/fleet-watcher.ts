import type { NatsConnection, Subscription } from "nats";
import { isIPv4 } from "node:net";
import type { Logger } from "pino";
import type { Heartbeat } from "../../shared/fleet.ts";
import { subjects } from "../../shared/subjects.ts";
import type { AgentRepo } from "./store.ts";
import type { FleetView, StateChange } from "./fleet-view.ts";

export interface FleetWatcherOptions {
  /** How often lost agents are looked for. @default 1000 */
  sweepIntervalMs?: number;
  /** How often an agent's last-seen time is written to the store. @default 30000 */
  persistEveryMs?: number;
}

/**
 * Feeds a FleetView from NATS heartbeats and writes agent state changes to the
 * store, so any coordinator (and `berth agent list`) sees the same fleet.
 */
export class FleetWatcher {
  private subs: Subscription[] = [];
  private timer?: NodeJS.Timeout;
  private readonly persisted = new Map<string, number>();
  private readonly sweepIntervalMs: number;
  private readonly persistEveryMs: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly view: FleetView,
    private readonly agents: AgentRepo,
    private readonly log: Logger,
    /** Revoked agents' heartbeats are dropped (one on the shared legacy user could still send them). */
    private readonly revoked?: { has(agentId: string): boolean },
    opts: FleetWatcherOptions = {},
  ) {
    this.sweepIntervalMs = opts.sweepIntervalMs ?? 1000;
    this.persistEveryMs = opts.persistEveryMs ?? 30_000;
  }

  private unwatchGpus?: () => void;

  start(): void {
    // Drained GPUs go to the store at once, so every coordinator's agent list says so.
    this.unwatchGpus = this.view.onGpuHealth((c) => {
      this.persisted.delete(c.agentId);
      for (const d of c.drained)
        this.log.warn(
          { agentId: c.agentId, hostname: c.hostname, gpu: d.uuid, index: d.index, reason: d.reason },
          "GPU drained",
        );
      for (const d of c.restored)
        this.log.info(
          { agentId: c.agentId, hostname: c.hostname, gpu: d.uuid, index: d.index },
          "GPU restored",
        );
    });
    const hb = this.nc.subscribe(subjects.allHeartbeats);
    const bye = this.nc.subscribe(subjects.allGoodbyes);
    this.subs = [hb, bye];
    void this.consume(hb, (data) => this.onHeartbeat(data));
    void this.consume(bye, (data) => this.onGoodbye(data));
    this.timer = setInterval(() => void this.sweep(), this.sweepIntervalMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.unwatchGpus?.();
    for (const s of this.subs) s.unsubscribe();
    this.subs = [];
  }

  private async consume(sub: Subscription, handle: (data: Uint8Array) => Promise<void>): Promise<void> {
    for await (const m of sub) {
      try {
        await handle(m.data);
      } catch (err) {
        this.log.warn({ err, subject: m.subject }, "ignoring a bad fleet message");
      }
    }
  }

  private async onHeartbeat(data: Uint8Array): Promise<void> {
    const hb = JSON.parse(new TextDecoder().decode(data)) as Heartbeat;
    if (typeof hb?.agentId !== "string" || !hb.capacity)
      throw new Error("heartbeat without agentId or capacity");
    if (this.revoked?.has(hb.agentId)) return;
    if (hb.nodeAddress !== undefined && !validNodeAddress(hb.nodeAddress)) {
      // The planner puts it in gangs' tunnels: a bad one is left out, as if the agent had none.
      this.log.warn({ agentId: hb.agentId, nodeAddress: hb.nodeAddress }, "ignoring a bad node address");
      delete hb.nodeAddress;
    }
    const now = Date.now();
    const change = this.view.observe(hb, now);
    const last = this.persisted.get(hb.agentId) ?? 0;
    if (change || now - last > this.persistEveryMs) {
      this.persisted.set(hb.agentId, now);
      await this.agents.recordSeen(hb.agentId, {
        state: "ready",
        lastSeenAt: new Date(now).toISOString(),
        capacity: hb.capacity,
        grpcAddress: hb.grpcAddress,
        hostname: hb.hostname,
      });
    }
    if (change) this.logChange(change);
  }

  private async onGoodbye(data: Uint8Array): Promise<void> {
    const { agentId } = JSON.parse(new TextDecoder().decode(data)) as { agentId: string };
    const change = this.view.leave(agentId);
    if (change) {
      await this.agents.setState(agentId, "left");
      this.logChange(change);
    }
  }

  private async sweep(): Promise<void> {
    for (const change of this.view.sweep(Date.now())) {
      this.logChange(change);
      try {
        await this.agents.setState(change.agentId, change.to);
      } catch (err) {
        this.log.warn({ err, agentId: change.agentId }, "cannot record agent state");
      }
    }
  }

  private logChange(c: StateChange): void {
    this.log.info({ agentId: c.agentId, from: c.from, to: c.to }, `agent ${c.agentId} is ${c.to}`);
  }
}

/** A heartbeat's nodeAddress another agent can tunnel to: an IPv4 address, not loopback or the wildcard. */
export function validNodeAddress(v: unknown): v is string {
  return typeof v === "string" && isIPv4(v) && !v.startsWith("127.") && v !== "0.0.0.0";
}
