// The JoinService the HTTP app tests build the coordinator's app with.

import { JoinService } from "../../coordinator/fleet/join.ts";
import { ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import type { Store } from "../../coordinator/records.ts";

/**
 * A JoinService over the store's join tokens, agents and cluster PKI. The
 * NATS address it hands joining agents is `natsUrl`, by default a placeholder
 * for tests that never dial it.
 */
export async function storeJoinService(
  store: Store,
  natsUrl = "nats://127.0.0.1:4222",
): Promise<JoinService> {
  return new JoinService({
    joinTokens: store.joinTokens,
    agents: store.agents,
    pki: await ClusterPki.load(store.kv),
    agentNats: { url: natsUrl, user: "agent", password: "pw" },
    heartbeatIntervalMs: 2000,
  });
}
