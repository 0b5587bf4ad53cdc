// The bookkeeping of one task between its delivery and its outcome: where it
// is handed out, its timers, and what its outcome event says about its start.

import { payloadFormat } from "./pulls.ts";
import type { InFlight, TaskAssignment } from "./types.ts";

/** What the runner gets for the task. */
export function assignment(t: InFlight): TaskAssignment {
  return {
    id: t.taskId,
    args: Buffer.from(t.msg.data).toString("base64"),
    attempt: t.attempt,
    timeout: t.timeoutS,
    callback_url: t.callbackUrl,
    created_at: t.createdAt,
    ...(payloadFormat(t.msg) ? { payload_format: "json" as const } : {}),
  };
}

/** Forgets a task's hand-out: the runner answered for it, or it was released or ended. */
export function unhand(t: InFlight): void {
  const slot = t.slot;
  if (slot) {
    slot.inFlight.delete(t.taskId);
    if (t.handOut) {
      const i = t.handOut.tasks.indexOf(t);
      if (i >= 0) t.handOut.tasks.splice(i, 1);
      if (t.handOut.tasks.length === 0) slot.handOuts.delete(t.handOut);
    }
  }
  clearTimeout(t.timeoutTimer);
  t.timeoutTimer = undefined;
  t.slot = undefined;
  t.handOut = undefined;
}

/** Stops the task's timers and forgets it; false when something else already settled it. */
export function settle(t: InFlight): boolean {
  const held = t.slot?.inFlight.get(t.taskId) === t;
  unhand(t);
  clearInterval(t.workingTimer);
  return held;
}

/** The task did not start after all (released, or never reached): its held-back `started` is not sent. */
export function dropHeldStart(t: InFlight): void {
  clearTimeout(t.startTimer);
  t.startTimer = undefined;
}

/**
 * What an outcome event needs about the start: the start folded in when
 * its `started` event was still held back, else nothing (after waiting for
 * that event, so the two arrive in order). `startedAt` is the runner's word,
 * trusted only near the hand-out.
 */
export async function foldedStart(t: InFlight, startedAt?: number): Promise<{ startedAt?: number }> {
  if (t.startTimer) {
    dropHeldStart(t);
    const at = startedAt !== undefined && startedAt >= t.handedAt - 1000 ? startedAt : t.handedAt;
    return { startedAt: Math.min(at, Date.now()) };
  }
  if (!t.started) return { startedAt: t.handedAt };
  await t.started;
  return {};
}
