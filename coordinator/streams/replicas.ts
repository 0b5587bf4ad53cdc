// How many copies of each stream and KV bucket berth creates: what the NATS
// cluster the coordinator is connected to can hold. A single nats-server
// holds one; a JetStream cluster of three or more nodes (berth up
// --replicas 3, docs/install.md "Highly available control plane") holds
// three, so a task, event or map survives one node going away. Read from the
// connection (the cluster's client URLs the server gossips), so an operator
// has no second setting to keep in step with the cluster.

/** The part of a NATS connection's server INFO this reads. */
export interface ServerInfoLike {
  info?: { cluster?: string; connect_urls?: string[] } | undefined;
}

/** 3 when the connected server is in a cluster of 3 or more nodes, else 1. */
export function streamReplicas(nc: ServerInfoLike): number {
  const info = nc.info;
  if (!info?.cluster) return 1;
  return (info.connect_urls?.length ?? 0) >= 3 ? 3 : 1;
}
