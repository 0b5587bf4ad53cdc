// One `berth serve` session: a serve deployment (version 0, updated in place)
// re-synced on every edit of the code root, its container logs on the
// terminal, deleted when the session ends (Ctrl-C, SIGTERM, or idle), so
// nothing keeps running. The coordinator also deletes serve deployments idle
// 10 minutes, so a killed CLI leaves nothing behind for long.

import { once } from "node:events";
import { describeError, isBerthError } from "../../shared/errors.ts";
import type { ApiClient } from "../api-client.ts";
import { DescribeFailed } from "./describe.ts";
import { followDeploymentLogs, type LogLine } from "./logs.ts";
import { type DeploymentJson, invocationLines, type Published, publish } from "./publish.ts";
import { DeploymentRoutes } from "./rest.ts";
import { type TreeWatcher, watchTree } from "./watch.ts";

export interface ServeOptions {
  api: ApiClient;
  target: string;
  name?: string;
  /** Seconds without a request (or a reload) before the session ends. */
  idleTimeoutS: number;
  /** Aborted by Ctrl-C / SIGTERM. */
  stop: AbortSignal;
  say(line: string): void;
  warn(line: string): void;
  printLog(l: LogLine): void;
  debounceMs?: number;
  /** How often the deployment is polled for last_request_at. @default idle/4, within 0.2-5 s */
  pollMs?: number;
}

/** What a re-sync must change for the coordinator to be bothered. */
const fingerprint = (p: Published) =>
  JSON.stringify([p.described.name, p.described.type, p.described.config, p.described.extra]);

/** Runs the session; resolves with the exit code once its deployment is deleted. */
export async function serveSession(o: ServeOptions): Promise<number> {
  const routes = new DeploymentRoutes(o.api);
  const pub = (): Promise<Published> =>
    publish(o.api, o.target, { serve: true, ...(o.name !== undefined ? { name: o.name } : {}) });

  let current = await pub();
  for (const w of current.warnings) o.warn(`warning: ${w}`);
  let dep: DeploymentJson = current.deployment;
  let lastPrint = fingerprint(current);
  o.say(`serving ${dep.name} (${dep.id})`);
  for (const line of invocationLines(dep, current.described)) o.say(line);
  o.say(`watching ${current.described.root}; Ctrl-C stops and deletes the deployment`);

  let exitCode = 0;
  const ended = new AbortController();
  const end = (code: number, message?: string) => {
    if (ended.signal.aborted) return;
    if (message) o.say(message);
    exitCode = code;
    ended.abort();
  };
  if (o.stop.aborted) end(0);
  o.stop.addEventListener("abort", () => end(0), { once: true });

  // Logs of the current deployment; restarted when a reload lands on another one (a renamed object).
  let logs = new AbortController();
  let logsDone = Promise.resolve();
  const followLogs = () => {
    logs = new AbortController();
    const signal = AbortSignal.any([logs.signal, ended.signal]);
    logsDone = followDeploymentLogs(o.api, dep.id, signal, { print: o.printLog, warn: o.warn });
  };
  followLogs();

  let lastActivity = Date.now();
  let lastRequestAt = dep.last_request_at ?? null;

  // Reloads run one at a time; edits during one schedule exactly one more.
  let reloading: Promise<void> | undefined;
  let again = false;
  const reload = async (): Promise<void> => {
    let next: Published;
    try {
      next = await pub();
    } catch (e) {
      const why =
        e instanceof DescribeFailed
          ? `${e.message}${e.traceback ? `\n${e.traceback}` : ""}`
          : describeError(e);
      o.warn(`reload failed: ${why.trimEnd()}\nstill serving the last good version`);
      return;
    }
    lastActivity = Date.now();
    if (next.deployment.id !== dep.id) {
      // The object's name changed: the old session deployment has no reason to live on.
      const old = dep.id;
      await routes.delete(old).catch(() => undefined);
      dep = next.deployment;
      logs.abort();
      await logsDone;
      followLogs();
      o.say(`now serving ${dep.name} (${dep.id}); deleted ${old}`);
    }
    current = next;
    const print = fingerprint(next);
    if (print === lastPrint) return;
    lastPrint = print;
    o.say(`reloaded ${dep.name} (code ${next.described.extra.code_sha256.slice(0, 12)})`);
  };
  const scheduleReload = () => {
    if (ended.signal.aborted) return;
    if (reloading) {
      again = true;
      return;
    }
    reloading = (async () => {
      do {
        again = false;
        await reload();
      } while (again && !ended.signal.aborted);
      reloading = undefined;
    })();
  };
  let watcher: TreeWatcher | undefined = watchTree(current.described.root, scheduleReload, {
    debounceMs: o.debounceMs ?? 300,
    onError: (e) => o.warn(`watching ${current.described.root} failed: ${e.message}; edits no longer reload`),
  });

  const idleMs = o.idleTimeoutS * 1000;
  let pollWarned = false;
  const poll = async () => {
    try {
      const d = await routes.get(dep.id);
      pollWarned = false;
      const at = d.last_request_at ?? null;
      if (at !== lastRequestAt) {
        lastRequestAt = at;
        lastActivity = Date.now();
      }
    } catch (e) {
      if (isBerthError(e) && e.code === "not_found") {
        end(
          1,
          `deployment ${dep.id} was deleted elsewhere (the coordinator ends serve sessions idle 10 minutes)`,
        );
        return;
      }
      if (!pollWarned) o.warn(`cannot check the deployment: ${describeError(e)}`);
      pollWarned = true;
    }
    if (Date.now() - lastActivity >= idleMs) {
      end(0, `no request for ${o.idleTimeoutS} s: stopping`);
    }
  };
  const pollMs = o.pollMs ?? Math.min(5000, Math.max(200, idleMs / 4));
  let polling = false;
  const poller = setInterval(() => {
    if (polling) return;
    polling = true;
    void poll().finally(() => (polling = false));
  }, pollMs);

  if (!ended.signal.aborted) await once(ended.signal, "abort");

  clearInterval(poller);
  watcher.close();
  watcher = undefined;
  // A reload in flight would re-create what is deleted below: let it land first.
  if (reloading) await reloading;
  await logsDone;
  try {
    await routes.delete(dep.id);
    o.say(`deleted ${dep.name} (${dep.id})`);
  } catch (e) {
    if (!(isBerthError(e) && e.code === "not_found")) {
      o.warn(
        `could not delete ${dep.id}: ${describeError(e)} (the coordinator removes it after 10 idle minutes)`,
      );
      return exitCode || 1;
    }
  }
  return exitCode;
}
