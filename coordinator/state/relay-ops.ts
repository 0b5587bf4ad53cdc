// Containers' Queue, Map and Signal operations, relayed by their agents
// (docs/queues.md): the relay router (coordinator/streams/) decodes the
// state wire's request and the workspace the agent vouches for; this area
// answers its own ops through the same `call` as the SDK's gateway route.

import type { StateRequest } from "../../shared/objects.ts";
import type { RelayRouter } from "../streams/index.ts";
import { OWN_STATE_OPS, type StateObjects } from "./state.ts";

/** Registers queue.*, map.* and signal.* with the router. */
export function serveStateOps(router: Pick<RelayRouter, "serve">, state: StateObjects): void {
  for (const op of OWN_STATE_OPS)
    router.serve(op, (call) => state.call(call.workspaceId, call.json() as unknown as StateRequest));
}
