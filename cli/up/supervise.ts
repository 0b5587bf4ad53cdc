// berth up's supervision of its berth children (coordinator, agent): one
// that dies while the cluster runs is started again, after a backoff that
// grows with each quick death, instead of taking the whole cluster down
// (docs/reliability.md, "berth up restarts what dies"). A child that keeps
// dying at once (a broken config, a port taken) is given up on, and berth up
// stops with the reason, as before.

import { setTimeout as sleep } from "node:timers/promises";
import type { ManagedChild } from "./child.ts";

export interface SuperviseOptions {
  /** Say what happened (berth up's output). */
  print: (line: string) => void;
  /** Called once when the child died too often: berth up stops the cluster. */
  onGiveUp: (why: string) => void;
  /** Deaths within `windowMs` that make berth up give up. @default 5 */
  maxRestarts?: number;
  /** @default 60_000 */
  windowMs?: number;
  /** First backoff; doubles per death in the window. @default 1000 */
  backoffMs?: number;
  /** @default 15_000 */
  maxBackoffMs?: number;
}

/** A child berth up keeps running: `current` is the live process, `stop()` ends it for good. */
export interface SupervisedChild {
  name: string;
  current(): ManagedChild;
  /** How many times it was started again. */
  restarts(): number;
  stop(graceMs?: number): Promise<void>;
}

export function supervise(name: string, start: () => ManagedChild, o: SuperviseOptions): SupervisedChild {
  const maxRestarts = o.maxRestarts ?? 5;
  const windowMs = o.windowMs ?? 60_000;
  const backoffMs = o.backoffMs ?? 1000;
  const maxBackoffMs = o.maxBackoffMs ?? 15_000;
  let stopped = false;
  let restarts = 0;
  const deaths: number[] = [];
  let child = start();
  const abort = new AbortController();

  const onExit = async (c: ManagedChild): Promise<void> => {
    const code = await c.exited;
    if (stopped || c !== child) return;
    const now = Date.now();
    deaths.push(now);
    while (deaths.length > 0 && (deaths[0] ?? now) < now - windowMs) deaths.shift();
    const how = `code ${code}${c.process.signalCode ? `, ${c.process.signalCode}` : ""}`;
    if (deaths.length > maxRestarts) {
      stopped = true;
      o.onGiveUp(`${name} exited (${how}) ${deaths.length} times within ${Math.round(windowMs / 1000)} s`);
      return;
    }
    const wait = Math.min(maxBackoffMs, backoffMs * 2 ** (deaths.length - 1));
    o.print(`berth up: ${name} exited unexpectedly (${how}); starting it again in ${wait / 1000} s`);
    try {
      await sleep(wait, undefined, { signal: abort.signal });
    } catch {
      return; // stopped while waiting
    }
    if (stopped) return;
    restarts++;
    child = start();
    void onExit(child);
  };
  void onExit(child);

  return {
    name,
    current: () => child,
    restarts: () => restarts,
    async stop(graceMs?: number) {
      stopped = true;
      abort.abort();
      await child.stop(graceMs);
    },
  };
}
