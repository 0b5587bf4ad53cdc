// The agent's side of "which agents hold layers": a request to the
// coordinators on its own layer-peers subject (coordinator/images/layer-peers.ts),
// answered with the cluster's other ready agents and their tunnels.

import type { NatsConnection } from "nats";
import { subjects } from "../../shared/subjects.ts";
import type { BlobPeer } from "./peer-blobs.ts";

/** Bound on the coordinators' answer; without one the pull goes to the registry. */
const ASK_TIMEOUT_MS = 3000;

export async function askLayerPeers(nc: NatsConnection, agentId: string): Promise<BlobPeer[]> {
  const msg = await nc.request(subjects.layerPeers(agentId), new Uint8Array(), { timeout: ASK_TIMEOUT_MS });
  const answer = JSON.parse(new TextDecoder().decode(msg.data)) as { peers?: BlobPeer[] };
  return (answer.peers ?? []).filter(
    (p) => typeof p.agentId === "string" && typeof p.address === "string" && p.agentId !== agentId,
  );
}
