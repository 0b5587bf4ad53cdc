// `berth agent run`: the request built from the flags, and the attached run
// (follow the logs, wait for the end, exit with the container's code).

import type { ContainerApi, ContainerStatus, RunContainerRequest } from "../../api/index.ts";
import { type EgressPolicy, resolveEgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import { sleep } from "../../shared/net.ts";
import { formatBytes } from "../output.ts";
import {
  keyValues,
  parseCpu,
  parseGpuTypes,
  parseMemory,
  parsePort,
  parsePositiveInt,
  parseSecondsMs,
} from "./args.ts";
import type { EdgeIo } from "./io.ts";

export const DEFAULT_RUN_CPU = 1;
export const DEFAULT_RUN_MEMORY = "128Mi";

export interface RunFlags {
  memory?: string;
  cpu?: string;
  gpus?: string;
  gpuType?: string;
  env?: string[];
  name?: string;
  label?: string[];
  blockNetwork?: boolean;
  allow?: string[];
  port?: string[];
  detach?: boolean;
  timeout?: string;
  rm?: boolean;
  workdir?: string;
  user?: string;
}

/** The egress flags shared by `run` and `policy`; undefined when none was given. */
export function egressFromFlags(o: {
  blockNetwork?: boolean;
  allow?: string[];
  open?: boolean;
}): EgressPolicy | undefined {
  const allow = o.allow ?? [];
  const given = [
    o.blockNetwork ? "--block-network" : "",
    allow.length ? "--allow" : "",
    o.open ? "--open" : "",
  ].filter(Boolean);
  if (given.length > 1)
    throw new BerthError("invalid_request", `${given.join(" and ")} cannot be combined; pick one`);
  if (o.open) return { mode: "open" };
  if (!o.blockNetwork && allow.length === 0) return undefined;
  return resolveEgressPolicy({ block_network: o.blockNetwork ?? false, allow_list: allow });
}

export function buildRunRequest(image: string, args: string[], o: RunFlags): RunContainerRequest {
  if (!image) throw new BerthError("invalid_request", "berth agent run needs an IMAGE");
  const req: RunContainerRequest = {
    image,
    args,
    cpu: o.cpu === undefined ? DEFAULT_RUN_CPU : parseCpu(o.cpu),
    memoryBytes: parseMemory(o.memory ?? DEFAULT_RUN_MEMORY),
  };
  if (o.name !== undefined) req.id = o.name;
  const env = keyValues(o.env ?? [], "--env");
  if (env) req.env = env;
  const labels = keyValues(o.label ?? [], "--label");
  if (labels) req.labels = labels;
  if (o.gpuType !== undefined && o.gpus === undefined) {
    throw new BerthError("invalid_request", "--gpu-type needs --gpus N (how many GPUs of those types)");
  }
  if (o.gpus !== undefined) {
    req.gpu = { count: parsePositiveInt(o.gpus, "--gpus") };
    if (o.gpuType !== undefined) req.gpu.types = parseGpuTypes(o.gpuType);
  }
  const egress = egressFromFlags(o);
  if (egress) req.egress = egress;
  if (o.port?.length) req.exposedPorts = [...new Set(o.port.map(parsePort))];
  if (o.timeout !== undefined) req.timeoutMs = parseSecondsMs(o.timeout, "--timeout");
  if (o.workdir !== undefined) req.cwd = o.workdir;
  if (o.user !== undefined) req.user = o.user;
  return req;
}

/** What an ended container means for the command: its exit code and, when it did not just exit, why. */
export function exitOutcome(s: ContainerStatus, timeoutMs?: number): { code: number; message?: string } {
  const name = `container ${s.id}`;
  switch (s.reason) {
    case "oom_killed":
      return {
        code: s.exitCode ?? 137,
        message: `${name} was OOM-killed (memory limit ${formatBytes(s.memoryBytes)})`,
      };
    case "killed":
      return { code: s.exitCode ?? 137, message: `${name} was killed` };
    case "timed_out": {
      const after = timeoutMs === undefined ? "" : ` after ${timeoutMs / 1000} s`;
      return { code: s.exitCode ?? 137, message: `${name} timed out${after} and was killed` };
    }
    case "unknown":
      return {
        code: s.exitCode ?? 1,
        message: `${name} ended for an unknown reason (the agent lost track of it)`,
      };
    default:
      return { code: s.exitCode ?? 0 };
  }
}

/** Polls until the container is stopped: its log stream can end a moment before its status says so. */
async function waitStopped(api: ContainerApi, id: string, timeoutMs: number): Promise<ContainerStatus> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await api.getContainer(id);
    if (s.state === "stopped") return s;
    if (Date.now() > deadline) {
      throw new BerthError(
        "unavailable",
        `the log stream of container ${id} ended but it is still ${s.state}; see \`berth agent ps\``,
      );
    }
    await sleep(100);
  }
}

/**
 * Runs attached: stdout lines to stdout, stderr lines to stderr, until the
 * container ends. The first SIGINT/SIGTERM stops the container (and the
 * command then ends with its code). Returns the exit code to leave with.
 */
export async function runAttached(
  api: ContainerApi,
  req: RunContainerRequest,
  io: EdgeIo,
  opts: { remove?: boolean; waitStoppedMs?: number } = {},
): Promise<number> {
  const started = await api.runContainer(req);
  const id = started.id;
  let stopping: Promise<unknown> | undefined;
  const onSignal = () => {
    stopping ??= api.stopContainer(id).catch((e: unknown) => {
      io.stderr.write(`berth: could not stop container ${id}: ${(e as Error).message}\n`);
    });
  };
  io.signals.on("SIGINT", onSignal);
  io.signals.on("SIGTERM", onSignal);
  try {
    for await (const entry of api.streamLogs(id, { follow: true })) {
      (entry.stream === "stderr" ? io.stderr : io.stdout).write(`${entry.line}\n`);
    }
    await stopping;
    const ended = await waitStopped(api, id, opts.waitStoppedMs ?? 30_000);
    if (opts.remove) await api.stopContainer(id, { remove: true });
    const outcome = exitOutcome(ended, req.timeoutMs);
    if (outcome.message) io.stderr.write(`berth: ${outcome.message}\n`);
    return outcome.code;
  } finally {
    io.signals.off("SIGINT", onSignal);
    io.signals.off("SIGTERM", onSignal);
  }
}
