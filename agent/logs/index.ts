export { TaskAttribution, type TaskAttributionOptions } from "./attribution.ts";
export { ShippingContainerPublisher } from "./publisher.ts";
export { LogShipper, type LogShipperOptions, type ShippedLine } from "./shipper.ts";
