// A gang member's environment and labels (shared/gang.ts): the torch.distributed
// rendezvous, NCCL's and gloo's interface, and which gang and rank it is.
// The request's own env of the same names loses: the agent knows the gang.

import { GangLabels, gangEnv } from "../../shared/gang.ts";
import type { ResolvedRunRequest } from "./request.ts";

/** The request with the gang's environment and labels; a request without `gang` as it is. */
export function applyGang(req: ResolvedRunRequest): ResolvedRunRequest {
  const g = req.gang;
  if (!g) return req;
  return {
    ...req,
    env: { ...req.env, ...gangEnv(g) },
    labels: {
      ...req.labels,
      [GangLabels.gangId]: g.id,
      [GangLabels.rank]: String(g.rank),
      [GangLabels.size]: String(g.size),
    },
  };
}

/** The gang rank a container's labels give (a recovered container keeps only its labels); undefined outside a gang. */
export function gangRankOf(labels: Record<string, string>): number | undefined {
  const rank = labels[GangLabels.rank];
  return rank !== undefined && /^\d+$/.test(rank) ? Number(rank) : undefined;
}
