// What makes a container a runner (docs/tasks.md): the code tree and the SDK
// mounted read-only, the bridge socket's directory mounted, the BERTH_*
// environment, the runner labels and, when no args are given, the runner
// module as the program. The agent makes these mounts itself, so they are
// not judged by the allowed-roots rule for the request's own mounts.

import { mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import { RunnerLabels, RunnerPaths } from "../../shared/tasks.ts";
import type { ExitReason, RunnerConfig } from "../../api/index.ts";
import type { BindMount } from "../runtime/index.ts";
import type { HostLogger, HostRunners } from "./options.ts";
import type { ResolvedRunRequest } from "./request.ts";

export const BRIDGE_SOCKET_NAME = "agent.sock";
export const RUNNER_ARGS = ["python3", "-u", "-m", "berth.runtime.runner"];

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

function text(v: unknown, field: string, required: boolean): string | undefined {
  if (v === undefined || v === null || (v === "" && !required)) return undefined;
  if (typeof v !== "string" || v.includes("\0") || (required && v.trim() === "")) {
    throw invalid(`${field} must be a${required ? " non-empty" : ""} string`, { field });
  }
  return v;
}

/** Checks a request's `runner` field (it arrives from gRPC: nothing is trusted). */
export function resolveRunnerConfig(v: unknown): RunnerConfig | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw invalid("runner must be an object", { field: "runner" });
  const out: RunnerConfig = {
    stubId: text(v.stubId, "runner.stubId", true) as string,
    workspaceId: text(v.workspaceId, "runner.workspaceId", true) as string,
    stubType: text(v.stubType, "runner.stubType", true) as string,
    handler: text(v.handler, "runner.handler", true) as string,
  };
  if (!/^[A-Za-z0-9_-]+$/.test(out.stubId)) {
    throw invalid(`runner.stubId ${JSON.stringify(out.stubId)} may hold only letters, digits, '_' and '-'`, {
      field: "runner.stubId",
    });
  }
  for (const k of ["onStart", "pythonVersion", "callbackUrl"] as const) {
    const s = text(v[k], `runner.${k}`, false);
    if (s !== undefined) out[k] = s;
  }
  if (v.retryFor !== undefined && v.retryFor !== null) {
    if (!Array.isArray(v.retryFor) || v.retryFor.some((r) => typeof r !== "string" || r.trim() === "")) {
      throw invalid("runner.retryFor must be a list of exception class names", { field: "runner.retryFor" });
    }
    out.retryFor = [...(v.retryFor as string[])];
  }
  if (v.workers !== undefined && v.workers !== null) {
    if (typeof v.workers !== "number" || !Number.isInteger(v.workers) || v.workers < 1 || v.workers > 1024) {
      throw invalid("runner.workers must be an integer 1..1024", { field: "runner.workers" });
    }
    out.workers = v.workers;
  }
  if (v.configVersion !== undefined && v.configVersion !== null) {
    if (typeof v.configVersion !== "number" || !Number.isInteger(v.configVersion) || v.configVersion < 1) {
      throw invalid("runner.configVersion must be a positive integer", { field: "runner.configVersion" });
    }
    out.configVersion = v.configVersion;
  }
  return out;
}

export interface RunnerPathsOnHost {
  /** The unpacked code tree, when the request has `code`. */
  codeDir?: string;
  /** This container's bridge directory (holds the socket), when it is a runner. */
  bridgeDir?: string;
  /** The SDK's Python package root (holds `berth/`). */
  sdkDir: string;
}

/**
 * The request as the runtime should run it, and the mounts the agent adds.
 * The runner's BERTH_* variables win over the request's env of the same name.
 */
export function applyRunner(
  req: ResolvedRunRequest,
  runner: RunnerConfig | undefined,
  paths: RunnerPathsOnHost,
): { req: ResolvedRunRequest; mounts: BindMount[] } {
  const mounts: BindMount[] = [];
  const out: ResolvedRunRequest = { ...req, env: { ...req.env }, labels: { ...req.labels } };
  // The code is a lower layer of the container's root (container-spec.ts), not a mount: writable there.
  if (paths.codeDir) out.cwd ??= RunnerPaths.code;
  if (!runner) {
    // A sandbox's or pod's workspace bridge: the socket only (sandboxes have the SDK at RunnerPaths.sdk already).
    if (paths.bridgeDir) {
      mounts.push({
        source: paths.bridgeDir,
        destination: RunnerPaths.bridgeDir,
        readonly: false,
        idmapped: true,
      });
      Object.assign(out.env, { BERTH_CONTAINER_ID: req.id, BERTH_AGENT_SOCKET: RunnerPaths.socket });
    }
    return { req: out, mounts };
  }
  if (!paths.bridgeDir) throw new Error("applyRunner: a runner needs its bridge directory");
  mounts.push({
    source: paths.bridgeDir,
    destination: RunnerPaths.bridgeDir,
    readonly: false,
    idmapped: true,
  });
  mounts.push({ source: paths.sdkDir, destination: RunnerPaths.sdk, readonly: true });
  Object.assign(out.env, {
    BERTH_REMOTE: "1",
    BERTH_CONTAINER_ID: req.id,
    BERTH_STUB_ID: runner.stubId,
    BERTH_STUB_TYPE: runner.stubType,
    BERTH_HANDLER: runner.handler,
    BERTH_ON_START: runner.onStart ?? "",
    BERTH_PYTHON_VERSION: runner.pythonVersion ?? "",
    BERTH_CALLBACK_URL: runner.callbackUrl ?? "",
    BERTH_RETRY_FOR: JSON.stringify(runner.retryFor ?? []),
    BERTH_WORKERS: String(runner.workers ?? 1),
    BERTH_AGENT_SOCKET: RunnerPaths.socket,
    PYTHONPATH: `${RunnerPaths.sdk}:${RunnerPaths.code}`,
  });
  out.labels[RunnerLabels.stubId] = runner.stubId;
  out.labels[RunnerLabels.workspaceId] = runner.workspaceId;
  if (out.args.length === 0) out.args = [...RUNNER_ARGS];
  return { req: out, mounts };
}

export const bridgeSocketPath = (bridgeDir: string) => join(bridgeDir, BRIDGE_SOCKET_NAME);

/** Bridge directories of runner containers (`<root>/<id>/agent.sock`) and the servers on them. */
export class RunnerBridges {
  constructor(
    private readonly root: string,
    private readonly runners: HostRunners | undefined,
  ) {
    mkdirSync(root, { recursive: true, mode: 0o755 });
  }

  check(): void {
    if (!this.runners) {
      throw new BerthError(
        "failed_precondition",
        "this agent cannot run runner containers: it has no task bridge (it is not joined to a coordinator)",
      );
    }
    this.runners.check();
  }

  /** Creates the container's bridge directory and serves the bridge in it; returns the directory. */
  async open(id: string, runner: RunnerConfig, onFirstAsk?: () => void, gangRank?: number): Promise<string> {
    const dir = join(this.root, id);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o755 });
    await (this.runners as HostRunners).open(id, runner, bridgeSocketPath(dir), onFirstAsk, gangRank);
    return dir;
  }

  /** A pre-warmed runner's bridge directory, served by nobody yet: it waits there for its stub. */
  makeDir(id: string): string {
    const dir = join(this.root, id);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o755 });
    return dir;
  }

  /** Removes a directory makeDir() made, when nobody serves it. */
  removeDir(id: string): void {
    rmSync(join(this.root, id), { recursive: true, force: true });
  }

  /**
   * Gives a pre-warmed runner's directory (mounted in it already) to the
   * container id it now has, and serves the runner's bridge there.
   * Renaming keeps the mount: the socket appears inside the container.
   */
  async adopt(fromId: string, toId: string, runner: RunnerConfig, onFirstAsk?: () => void): Promise<string> {
    const dir = join(this.root, toId);
    renameSync(join(this.root, fromId), dir);
    await (this.runners as HostRunners).open(toId, runner, bridgeSocketPath(dir), onFirstAsk);
    return dir;
  }

  /**
   * Creates a sandbox's or pod's bridge directory and serves its workspace bridge there; returns the
   * directory. An agent not joined to a coordinator has nothing to relay to: the sandbox still runs,
   * without the socket (undefined), and the SDK in it says no agent socket is set up when asked.
   */
  async openWorkspace(id: string, workspaceId: string): Promise<string | undefined> {
    if (!this.runners?.openWorkspace) return undefined;
    const dir = join(this.root, id);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o755 });
    await this.runners.openWorkspace(id, workspaceId, bridgeSocketPath(dir));
    return dir;
  }

  /**
   * A pre-warmed sandbox's directory (mounted in it already, empty) given to
   * the sandbox's id, and its workspace bridge served there; undefined (the
   * directory kept for close()) when there is no bridge to serve, as openWorkspace.
   */
  async adoptWorkspace(fromId: string, toId: string, workspaceId: string | undefined) {
    const dir = join(this.root, toId);
    renameSync(join(this.root, fromId), dir);
    if (!workspaceId || !this.runners?.openWorkspace) return undefined;
    await this.runners.openWorkspace(toId, workspaceId, bridgeSocketPath(dir));
    return dir;
  }

  /** After an agent restart: a live sandbox's or pod's workspace bridge, served again. */
  async reopenWorkspace(id: string, workspaceId: string, log: HostLogger): Promise<void> {
    if (!this.runners?.openWorkspace) return;
    const dir = join(this.root, id);
    try {
      mkdirSync(dir, { recursive: true, mode: 0o755 });
      await this.runners.openWorkspace(id, workspaceId, bridgeSocketPath(dir));
    } catch (e) {
      log.error({ id, err: describeError(e) }, "serving the workspace bridge of a recovered container");
    }
  }

  /** After an agent restart: serves a live runner container's bridge again (a new socket in its directory). */
  async reopen(id: string, runner: RunnerConfig, log: HostLogger, gangRank?: number): Promise<void> {
    if (!this.runners) return;
    const dir = join(this.root, id);
    try {
      mkdirSync(dir, { recursive: true, mode: 0o755 });
      await this.runners.open(id, runner, bridgeSocketPath(dir), undefined, gangRank);
    } catch (e) {
      log.error({ id, err: describeError(e) }, "serving the task bridge of a recovered runner container");
    }
  }

  async close(id: string): Promise<void> {
    await this.runners?.close(id).catch(() => {});
    rmSync(join(this.root, id), { recursive: true, force: true });
  }

  exited(id: string, exitCode: number | undefined, reason?: ExitReason, memoryBytes?: number): void {
    this.runners?.exited(id, exitCode, reason, memoryBytes);
  }
}
