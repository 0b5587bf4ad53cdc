import { join, resolve } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { ContainerEvent, LogLine, RuntimeLogger } from "./types.ts";

export interface ContainerRuntimeOptions {
  /** <agentDataDir>/containers: one bundle dir per container. */
  root: string;
  /** runc --root. @default <root>/.runc */
  runcRoot?: string;
  /** @default "runc" */
  runc?: string;
  logger?: RuntimeLogger;
  onEvent?: (e: ContainerEvent) => void;
  onLog?: (line: LogLine) => void;
  /** One timer checks exits, timeouts and logs of every container. @default 200 */
  pollIntervalMs?: number;
  /** @default 60000 */
  startTimeoutMs?: number;
  /** Per stream; see LogFollower. @default 16 MiB */
  maxLogSpoolBytes?: number;
  /** @default "/berth" */
  cgroupParent?: string;
}

export interface ResolvedContainerRuntimeOptions {
  root: string;
  runcRoot: string;
  runc: string;
  logger?: RuntimeLogger;
  onEvent: (e: ContainerEvent) => void;
  onLog: (line: LogLine) => void;
  pollIntervalMs: number;
  startTimeoutMs: number;
  maxLogSpoolBytes: number;
  cgroupParent: string;
}

export function resolveContainerRuntimeOptions(o: ContainerRuntimeOptions): ResolvedContainerRuntimeOptions {
  if (!o.root) throw new BerthError("invalid_request", "ContainerRuntime needs a root directory");
  const root = resolve(o.root);
  const r: ResolvedContainerRuntimeOptions = {
    root,
    runcRoot: resolve(o.runcRoot ?? join(root, ".runc")),
    runc: o.runc ?? "runc",
    logger: o.logger,
    onEvent: o.onEvent ?? (() => {}),
    onLog: o.onLog ?? (() => {}),
    pollIntervalMs: o.pollIntervalMs ?? 200,
    startTimeoutMs: o.startTimeoutMs ?? 60_000,
    maxLogSpoolBytes: o.maxLogSpoolBytes ?? 16 * 1024 * 1024,
    cgroupParent: o.cgroupParent ?? "/berth",
  };
  if (!(r.pollIntervalMs >= 10)) throw new BerthError("invalid_request", "pollIntervalMs must be >= 10");
  if (!(r.startTimeoutMs >= 1000)) throw new BerthError("invalid_request", "startTimeoutMs must be >= 1000");
  if (!/^\/[A-Za-z0-9_./-]*$/.test(r.cgroupParent)) {
    throw new BerthError("invalid_request", `cgroupParent ${r.cgroupParent} must be an absolute cgroup path`);
  }
  return r;
}
