// Which agents an agent may ask for layers (docs/images.md, "Layers from
// peers"): an agent's request on its own layer-peers subject is answered with
// the other ready agents of the cluster and their tunnels' addresses. NATS
// permissions let an agent publish only under its own prefix, so the subject
// names the asker truthfully; it is left out of the answer.

import type { NatsConnection, Subscription } from "nats";
import type { Heartbeat } from "../../shared/fleet.ts";
import { AGENT_PREFIX, subjects } from "../../shared/subjects.ts";

/** One coordinator answers each request. */
const LAYER_PEERS_QUEUE = "berth-layer-peers";

/** The answer: agents and their tunnels (host:port). */
export interface LayerPeersAnswer {
  peers: { agentId: string; address: string }[];
}

export function layerPeersOf(
  asker: string,
  ready: { agentId: string; heartbeat: Pick<Heartbeat, "proxyAddress"> }[],
): LayerPeersAnswer {
  return {
    peers: ready.flatMap((a) =>
      a.agentId !== asker && a.heartbeat.proxyAddress
        ? [{ agentId: a.agentId, address: a.heartbeat.proxyAddress }]
        : [],
    ),
  };
}

/** Answers agents' layer-peers requests until the returned function is called. */
export function serveLayerPeers(
  nc: NatsConnection,
  ready: () => { agentId: string; heartbeat: Pick<Heartbeat, "proxyAddress"> }[],
): () => void {
  const sub: Subscription = nc.subscribe(subjects.allLayerPeers, {
    queue: LAYER_PEERS_QUEUE,
    callback: (err, msg) => {
      if (err || !msg.reply) return;
      const asker = msg.subject.slice(AGENT_PREFIX.length + 1).split(".")[0] ?? "";
      msg.respond(new TextEncoder().encode(JSON.stringify(layerPeersOf(asker, ready()))));
    },
  });
  return () => sub.unsubscribe();
}
