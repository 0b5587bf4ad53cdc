import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import type { Heartbeat } from "../../shared/fleet.ts";
import { subjects } from "../../shared/subjects.ts";

/** Publishes the host's capacity every interval while a NATS connection is up. */
export class HeartbeatPublisher {
  private timer?: NodeJS.Timeout;
  private nc?: NatsConnection;
  private stopped = false;

  constructor(
    private readonly agentId: string,
    private readonly intervalMs: number,
    private readonly build: () => Promise<Heartbeat>,
    private readonly log: Logger,
  ) {}

  attach(nc: NatsConnection): void {
    this.nc = nc;
    void this.beat();
  }

  start(): void {
    this.timer = setInterval(() => void this.beat(), this.intervalMs);
  }

  private async beat(): Promise<void> {
    const nc = this.nc;
    if (!nc || nc.isClosed() || this.stopped) return;
    try {
      const hb = await this.build();
      nc.publish(subjects.heartbeat(this.agentId), JSON.stringify(hb));
    } catch (err) {
      this.log.warn({ err }, "heartbeat not sent");
    }
  }

  /** Says goodbye so coordinators mark the agent as left rather than lost. */
  async stop(sayGoodbye: boolean): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    const nc = this.nc;
    if (sayGoodbye && nc && !nc.isClosed()) {
      nc.publish(subjects.goodbye(this.agentId), JSON.stringify({ agentId: this.agentId }));
      await nc.flush().catch(() => {});
    }
  }
}

/** `address` (host:port, [v6]:port) with its port replaced: a listener bound to port 0 is advertised at the port it got. */
export function withPort(address: string, port: number): string {
  const colon = address.lastIndexOf(":");
  const host = colon > 0 && !address.endsWith("]") ? address.slice(0, colon) : address;
  return `${host}:${port}`;
}
