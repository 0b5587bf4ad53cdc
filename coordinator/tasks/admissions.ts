// Tasks being submitted, per workspace, before they reach the live index:
// the max_pending_tasks check counts them as pending, so that concurrent
// submissions cannot pass the limit together.

import { checkPendingTasks } from "../limits/index.ts";

export class PendingAdmissions {
  private readonly admitting = new Map<string, number>();

  /**
   * Checks that `adding` more tasks fit the workspace's limit (`max`, null for
   * none) beside `pending` and the ones still being submitted, and reserves
   * them in the same step. Call the answer once the tasks are in the live
   * index, where they count from then on; later calls do nothing.
   */
  reserve(workspaceId: string, max: number | null, pending: number, adding: number): () => void {
    const admitting = this.admitting.get(workspaceId) ?? 0;
    checkPendingTasks(max, pending + admitting, adding);
    let reserved = max !== null;
    if (reserved) this.admitting.set(workspaceId, admitting + adding);
    return () => {
      if (!reserved) return;
      reserved = false;
      const left = (this.admitting.get(workspaceId) ?? 0) - adding;
      if (left > 0) this.admitting.set(workspaceId, left);
      else this.admitting.delete(workspaceId);
    };
  }
}
