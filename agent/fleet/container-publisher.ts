import type { NatsConnection } from "nats";
import { type ContainerEventMessage, type ContainerLogMessage, subjects } from "../../shared/subjects.ts";

/**
 * Publishes container events and log lines to NATS (the coordinator's
 * JetStream streams capture them). Without a connection nothing is sent:
 * the lines stay in the container's log files, readable with StreamLogs.
 */
export class ContainerPublisher {
  private nc?: NatsConnection;
  private readonly encoder = new TextEncoder();

  constructor(private readonly agentId: string) {}

  attach(nc: NatsConnection): void {
    this.nc = nc;
  }

  event(e: Omit<ContainerEventMessage, "agentId">): void {
    this.send(subjects.containerEvent(this.agentId, e.containerId), { agentId: this.agentId, ...e });
  }

  log(l: Omit<ContainerLogMessage, "agentId">): void {
    this.send(subjects.containerLog(this.agentId, l.containerId), { agentId: this.agentId, ...l });
  }

  private send(subject: string, body: unknown): void {
    const nc = this.nc;
    if (!nc || nc.isClosed()) return;
    nc.publish(subject, this.encoder.encode(JSON.stringify(body)));
  }
}
