// After `berth deploy app.py:pod`: a pod deployment has no task to fail, so
// the CLI watches its first container come up and says why when it does not
// (the entrypoint is not found, or exits at once): the deployment's
// start_error, from the container manager's failed starts.

import { setTimeout as sleep } from "node:timers/promises";
import type { DeploymentRoutes } from "./rest.ts";

export interface PodWaitOptions {
  /** How long to watch before leaving the pod to start on its own. @default 60 */
  waitS?: number;
  /** How long a running container must stay up to count as started. @default 3 */
  settleS?: number;
  /** @default 1000 */
  pollMs?: number;
}

export type PodStart = { ok: true } | { ok: false; error: string } | { ok: "pending" };

/** Polls the deployment until its container has run settleS, a start failed, or waitS passed. */
export async function waitForPodStart(
  routes: Pick<DeploymentRoutes, "get">,
  deploymentId: string,
  o: PodWaitOptions = {},
): Promise<PodStart> {
  const pollMs = o.pollMs ?? 1000;
  const deadline = Date.now() + (o.waitS ?? 60) * 1000;
  let upSince: number | undefined;
  for (;;) {
    const d = (await routes.get(deploymentId)) as { containers?: number; start_error?: string | null };
    if (d.start_error) return { ok: false, error: d.start_error };
    const now = Date.now();
    if ((d.containers ?? 0) > 0) {
      upSince ??= now;
      if (now - upSince >= (o.settleS ?? 3) * 1000) return { ok: true };
    } else {
      upSince = undefined;
    }
    if (now >= deadline) return { ok: "pending" };
    await sleep(pollMs);
  }
}
