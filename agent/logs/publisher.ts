import type { NatsConnection } from "nats";
import type { ContainerLogMessage } from "../../shared/subjects.ts";
import { ContainerPublisher } from "../fleet/container-publisher.ts";
import type { LogShipper } from "./shipper.ts";

/**
 * The container publisher with log lines going through the LogShipper
 * (batched, budgeted, attributed to tasks) instead of one message per line;
 * container events are sent as before.
 */
export class ShippingContainerPublisher extends ContainerPublisher {
  constructor(
    agentId: string,
    private readonly shipper: LogShipper,
  ) {
    super(agentId);
  }

  override attach(nc: NatsConnection): void {
    super.attach(nc);
    this.shipper.attach(nc);
  }

  override log(l: Omit<ContainerLogMessage, "agentId">): void {
    this.shipper.line(l);
  }
}
