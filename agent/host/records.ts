// The host's own per-container record (root/<id>.json): what the runtime
// does not know (image, GPUs, network, the request minus credentials), so a
// restarted agent can rebuild allocations and answer getContainer.

import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { EgressPolicy } from "../../shared/egress.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import type { ImageInfo } from "../images/index.ts";
import type { ContainerNetwork } from "../network/index.ts";
import type { ContainerStatus, RunnerConfig } from "../../api/index.ts";
import type { ContainerInfo } from "../runtime/index.ts";
import type { ResolvedRunRequest } from "./request.ts";

export interface HostRecord {
  version: 1;
  id: string;
  image: string;
  imageDigest: string;
  cpu: number;
  memoryBytes: number;
  gpus: string[];
  egress: EgressPolicy;
  exposedPorts: number[];
  ipv4?: string;
  ipv6?: string;
  labels: Record<string, string>;
  /** The request as resolved, without credentials: for operators and debugging. */
  request: {
    args: string[];
    env: Record<string, string>;
    cwd?: string;
    user?: { uid: number; gid: number };
    hostname?: string;
    pidsLimit?: number;
    gpu?: { count: number; types?: string[]; memoryMiB?: number };
    mounts: { source: string; destination: string; readOnly: boolean }[];
    timeoutMs?: number;
    code?: { sha256: string };
    /** Set for runner containers: a restarted agent serves their bridge again. */
    runner?: RunnerConfig;
    /** Set for sandboxes and pods with the workspace bridge: served again after a restart too. */
    bridge?: { workspaceId: string };
  };
  /** Set when stopContainer (without remove) or the container's own exit released its resources. */
  released?: boolean;
}

const RECORD_SUFFIX = ".json";

export class HostRecords {
  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  path(id: string): string {
    return join(this.dir, `${id}${RECORD_SUFFIX}`);
  }

  /** Write to a temp file and rename, so a crash leaves the old record or the new one. */
  write(r: HostRecord): void {
    const tmp = `${this.path(r.id)}.tmp`;
    writeFileSync(tmp, `${JSON.stringify(r, null, 2)}\n`, { mode: 0o600 });
    renameSync(tmp, this.path(r.id));
  }

  remove(id: string): void {
    rmSync(this.path(id), { force: true });
  }

  readAll(): HostRecord[] {
    const out: HostRecord[] = [];
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith(RECORD_SUFFIX)) continue;
      try {
        const r = JSON.parse(readFileSync(join(this.dir, name), "utf8")) as HostRecord;
        if (r.version === 1 && typeof r.id === "string") out.push(r);
      } catch {
        // A torn temp file is never named *.json; an unreadable record is skipped (and reported by the caller).
      }
    }
    return out;
  }
}

export function newHostRecord(
  req: ResolvedRunRequest,
  image: ImageInfo,
  gpus: GpuDevice[],
  net: ContainerNetwork,
): HostRecord {
  const request: HostRecord["request"] = { args: req.args, env: req.env, mounts: req.mounts };
  if (req.cwd) request.cwd = req.cwd;
  if (req.user) request.user = req.user;
  if (req.hostname) request.hostname = req.hostname;
  if (req.pidsLimit !== undefined) request.pidsLimit = req.pidsLimit;
  if (req.gpu) request.gpu = req.gpu;
  if (req.timeoutMs !== undefined) request.timeoutMs = req.timeoutMs;
  if (req.code) request.code = req.code;
  if (req.runner) request.runner = req.runner;
  if (req.bridge) request.bridge = req.bridge;
  return {
    version: 1,
    id: req.id,
    image: image.ref,
    imageDigest: image.digest,
    cpu: req.cpu,
    memoryBytes: req.memoryBytes,
    gpus: gpus.map((g) => g.uuid),
    egress: net.policy,
    exposedPorts: req.exposedPorts,
    ipv4: net.ipv4,
    ipv6: net.ipv6,
    labels: req.labels,
    request,
  };
}

export function recordStatus(r: HostRecord, info: ContainerInfo | undefined): ContainerStatus {
  const s: ContainerStatus = {
    id: r.id,
    image: r.image,
    imageDigest: r.imageDigest,
    state: info?.status ?? "stopped",
    pid: info?.pid ?? 0,
    createdAt: info?.createdAt ?? 0,
    labels: { ...r.labels },
    cpu: r.cpu,
    memoryBytes: r.memoryBytes,
    gpus: [...r.gpus],
    egress: r.egress,
    exposedPorts: [...r.exposedPorts],
  };
  if (info?.startedAt !== undefined) s.startedAt = info.startedAt;
  if (info?.exitedAt !== undefined) s.exitedAt = info.exitedAt;
  if (info?.exitCode !== undefined) s.exitCode = info.exitCode;
  if (info?.reason !== undefined) s.reason = info.reason;
  if (r.request.gpu?.memoryMiB !== undefined) s.gpuMemoryMiB = r.request.gpu.memoryMiB;
  if (r.ipv4) s.ipv4 = r.ipv4;
  if (r.ipv6) s.ipv6 = r.ipv6;
  return s;
}
