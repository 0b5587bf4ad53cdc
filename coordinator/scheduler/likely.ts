// Where the next containers of a request would go: the agents place() would
// pick, one after another, each at most once. Pull ahead asks it which hosts
// should fetch a new deployment's image before its first request.

import type { ClusterView } from "./cluster-view.ts";
import { type PlacementRequest, place } from "./place.ts";

/** Up to `n` distinct agents, in the order place() would choose them for `req`. */
export function likelyAgents(view: ClusterView, req: PlacementRequest, n: number): string[] {
  const out: string[] = [];
  let agents = view.agents;
  while (out.length < n) {
    const p = place({ agents }, req);
    if (!p.ok) break;
    out.push(p.agentId);
    agents = agents.filter((a) => a.agentId !== p.agentId);
  }
  return out;
}
