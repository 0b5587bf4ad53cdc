// Which tasks a runner container may take. A container runs the stub config
// it was started for (RunnerConfig.configVersion); a task carries the config
// version it was submitted for (TaskHeaders.configVersion). Once the stub's
// config changed (its image, say), an idle container of the old config must
// not take the next task: it would run the new call with the old image. It
// may still take tasks of its own config or an older one: no container of an
// old config is started again, so those would have nowhere else to run.

import type { InFlight, Slot } from "./types.ts";

export class ConfigVersions {
  /** The newest config version seen per stub on this agent (from its containers and its tasks). */
  private readonly newest = new Map<string, number>();

  /** Notes a config version of the stub: a container started for it, or a task submitted for it. */
  note(stubId: string, version: number | undefined): void {
    if (!version) return;
    if (version > (this.newest.get(stubId) ?? 0)) this.newest.set(stubId, version);
  }

  /** The stub has no container on this agent any more: what was seen of it goes too. */
  forget(stubId: string): void {
    this.newest.delete(stubId);
  }

  /** The container runs an older config than one this agent has seen: it takes no new task. */
  outdated(slot: Pick<Slot, "stubId" | "configVersion">): boolean {
    return slot.configVersion !== undefined && slot.configVersion < (this.newest.get(slot.stubId) ?? 0);
  }

  /** Whether the container may run the task: its own config or an older one (unknown on either side: yes). */
  fits(slot: Pick<Slot, "configVersion">, t: Pick<InFlight, "configVersion">): boolean {
    return slot.configVersion === undefined || t.configVersion === 0 || t.configVersion <= slot.configVersion;
  }
}

/**
 * What an outdated container's ask does instead of pulling: waits like a pull
 * that finds nothing (so its runner does not ask again at once), ending early
 * when the ask is withdrawn or the slot closes.
 */
export function idleAsk(slot: Slot, waitMs: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      slot.pulls.delete(done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, waitMs));
    signal.addEventListener("abort", done, { once: true });
    slot.pulls.add(done);
    if (signal.aborted || slot.closed) done();
  });
}
