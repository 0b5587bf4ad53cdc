// RunContainerRequest → ResolvedRunRequest: every field type-checked and
// defaulted before anything is reserved, pulled or started. Requests arrive
// from gRPC and the edge CLI, so nothing here trusts the TypeScript types.

import { isAbsolute } from "node:path";
import { type EgressPolicy, validateEgressPolicy } from "../../shared/egress.ts";
import { invalid } from "../../shared/errors.ts";
import { newId } from "../../shared/ids.ts";
import { checkSha256 } from "../code/store.ts";
import type {
  BucketMount,
  GangMember,
  GpuRequest,
  RunContainerRequest,
  RunnerConfig,
  SyscallFilter,
  VolumeMount,
} from "../../api/index.ts";
import { SYSCALL_FILTERS } from "../../api/index.ts";
import { type Isolation, ISOLATIONS, isIsolation } from "../runtime/index.ts";
import { checkCpuAndMemory } from "../runtime/spec.ts";
import { validateGangMember } from "../network/gang-member.ts";
import { checkBucketMounts } from "../volumes/buckets.ts";
import { checkVolumeMounts } from "../volumes/volumes.ts";
import { checkWorkspaceId } from "../../shared/volumes.ts";
import { resolveRunnerConfig } from "./runner.ts";

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const ENV_KEY_RE = /^[^=\0]+$/;
const HOSTNAME_RE = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

export interface ResolvedRunRequest {
  id: string;
  image?: string;
  credentials?: { username: string; password: string };
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  /** Absent: the image's user, else root. */
  user?: { uid: number; gid: number };
  hostname?: string;
  cpu: number;
  memoryBytes: number;
  pidsLimit?: number;
  gpu?: GpuRequest;
  egress: EgressPolicy;
  exposedPorts: number[];
  mounts: { source: string; destination: string; readOnly: boolean }[];
  timeoutMs?: number;
  labels: Record<string, string>;
  startupWindowMs?: number;
  /** Lower-cased sha256 of a code archive to mount. */
  code?: { sha256: string };
  runner?: RunnerConfig;
  volumes: VolumeMount[];
  /** With their keys: never written to the host record. */
  buckets: BucketMount[];
  /** The workspace bridge of a container that is not a runner (sandboxes, pods). */
  bridge?: { workspaceId: string };
  /** Absent: "container", the agent's own OCI runtime. */
  isolation?: Isolation;
  /** false: no user namespace, root inside is the host's root (a workspace opted out). Absent: true. */
  userNamespace?: false;
  /** "denylist": the older allow-by-default profile (a workspace opted out). Absent: "allowlist". */
  syscallFilter?: Exclude<SyscallFilter, "allowlist">;
  /** A member of a gang across hosts: joined to the gang's network, with its environment and labels. */
  gang?: GangMember;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

function stringMap(v: unknown, field: string, keyRe?: RegExp): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw invalid(`${field} must be an object of strings`, { field });
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== "string" || val.includes("\0") || (keyRe && !keyRe.test(k))) {
      throw invalid(
        `${field} ${JSON.stringify(k)} is invalid: values must be strings without NUL${keyRe ? ", names may not contain '=' or NUL" : ""}`,
        { field },
      );
    }
    out[k] = val;
  }
  return out;
}

function optionalInt(v: unknown, field: string, min: number): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min) {
    throw invalid(`${field} must be an integer >= ${min}, got ${JSON.stringify(v)}`, { field });
  }
  return v;
}

function absolute(v: unknown, field: string): string {
  if (typeof v !== "string" || !isAbsolute(v) || v.includes("\0")) {
    throw invalid(`${field} must be an absolute path, got ${JSON.stringify(v)}`, { field });
  }
  return v;
}

/** "uid" or "uid:gid", numeric (the host does not read the image's /etc/passwd). */
export function parseUser(v: unknown, field = "user"): { uid: number; gid: number } {
  const m = typeof v === "string" ? /^(\d{1,10})(?::(\d{1,10}))?$/.exec(v) : null;
  const uid = Number(m?.[1]);
  const gid = m?.[2] === undefined ? uid : Number(m[2]);
  if (!m || uid > 0xffffffff || gid > 0xffffffff) {
    throw invalid(`${field} must be "uid" or "uid:gid" (numbers), got ${JSON.stringify(v)}`, { field });
  }
  return { uid, gid };
}

function gpuRequest(v: unknown): GpuRequest | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw invalid("gpu must be an object { count, types? }", { field: "gpu" });
  const count = optionalInt(v.count, "gpu.count", 0) ?? 0;
  const types = v.types ?? [];
  if (!Array.isArray(types) || types.some((t) => typeof t !== "string" || t.trim() === "")) {
    throw invalid("gpu.types must be a list of GPU type names", { field: "gpu.types" });
  }
  if (count === 0) return undefined;
  const memoryMiB = optionalInt(v.memoryMiB, "gpu.memoryMiB", 1);
  if (memoryMiB !== undefined && count !== 1) {
    throw invalid(`gpu.memoryMiB asks for part of one shared GPU: gpu.count must be 1, got ${count}`, {
      field: "gpu.count",
    });
  }
  return {
    count,
    types: types.map((t: string) => t.trim()),
    ...(memoryMiB !== undefined ? { memoryMiB } : {}),
  };
}

/** Checks and defaults a request; throws BerthError invalid_request naming the field. */
export function resolveRunRequest(req: RunContainerRequest): ResolvedRunRequest {
  if (!isObject(req)) throw invalid("runContainer needs a request object");
  const id = req.id ?? newId("ctr");
  if (typeof id !== "string" || !ID_RE.test(id)) {
    throw invalid(
      `container id ${JSON.stringify(id)} is invalid: use 1-128 letters, digits, '_', '.', '-', starting with a letter or digit`,
      { field: "id" },
    );
  }
  if (req.image !== undefined && (typeof req.image !== "string" || req.image.trim() === "")) {
    throw invalid("image must be a non-empty image reference", { field: "image" });
  }
  const creds = req.imageCredentials;
  if (
    creds !== undefined &&
    (!isObject(creds) || typeof creds.username !== "string" || typeof creds.password !== "string")
  ) {
    throw invalid("imageCredentials must be { username, password } strings", { field: "imageCredentials" });
  }
  const args = req.args ?? [];
  if (!Array.isArray(args) || args.some((a) => typeof a !== "string" || a.includes("\0"))) {
    throw invalid("args must be a list of strings without NUL bytes", { field: "args" });
  }
  if (args.length > 0 && args[0] === "") throw invalid("args[0] must not be empty", { field: "args" });
  checkCpuAndMemory(req.cpu, req.memoryBytes);
  if (req.hostname !== undefined && (typeof req.hostname !== "string" || !HOSTNAME_RE.test(req.hostname))) {
    throw invalid(`hostname ${JSON.stringify(req.hostname)} is invalid`, { field: "hostname" });
  }
  const ports = req.exposedPorts ?? [];
  if (!Array.isArray(ports)) throw invalid("exposedPorts must be a list of ports", { field: "exposedPorts" });
  for (const p of ports) {
    if (typeof p !== "number" || !Number.isInteger(p) || p < 1 || p > 65535) {
      throw invalid(`exposedPorts: ${JSON.stringify(p)} is not a port 1..65535`, { field: "exposedPorts" });
    }
  }
  const mounts = req.mounts ?? [];
  if (!Array.isArray(mounts)) throw invalid("mounts must be a list", { field: "mounts" });
  const out: ResolvedRunRequest = {
    id,
    args: [...args],
    env: stringMap(req.env, "env", ENV_KEY_RE),
    cpu: req.cpu,
    memoryBytes: req.memoryBytes,
    egress: validateEgressPolicy(req.egress ?? { mode: "open" }),
    exposedPorts: [...new Set(ports)],
    mounts: mounts.map((m, i) => {
      if (!isObject(m)) throw invalid(`mounts[${i}] must be { source, destination, readOnly? }`);
      if (m.readOnly !== undefined && typeof m.readOnly !== "boolean") {
        throw invalid(`mounts[${i}].readOnly must be a boolean`, { field: `mounts[${i}].readOnly` });
      }
      return {
        source: absolute(m.source, `mounts[${i}].source`),
        destination: absolute(m.destination, `mounts[${i}].destination`),
        readOnly: m.readOnly === true,
      };
    }),
    labels: stringMap(req.labels, "labels"),
    volumes: checkVolumeMounts(req.volumes),
    buckets: checkBucketMounts(req.buckets),
  };
  if (req.image !== undefined) out.image = req.image.trim();
  if (creds) out.credentials = { username: creds.username, password: creds.password };
  if (req.cwd !== undefined) out.cwd = absolute(req.cwd, "cwd");
  if (req.user !== undefined) out.user = parseUser(req.user);
  if (req.hostname !== undefined) out.hostname = req.hostname;
  const pids = optionalInt(req.pidsLimit, "pidsLimit", 1);
  if (pids !== undefined) out.pidsLimit = pids;
  const gpu = gpuRequest(req.gpu);
  if (gpu) out.gpu = gpu;
  const timeout = optionalInt(req.timeoutMs, "timeoutMs", 1);
  if (timeout !== undefined) out.timeoutMs = timeout;
  const window = optionalInt(req.startupWindowMs, "startupWindowMs", 0);
  if (window !== undefined) out.startupWindowMs = window;
  if (req.code !== undefined && req.code !== null) {
    if (!isObject(req.code)) throw invalid("code must be { sha256 }", { field: "code" });
    out.code = { sha256: checkSha256(req.code.sha256) };
  }
  const runner = resolveRunnerConfig(req.runner);
  if (runner) out.runner = runner;
  if (req.bridge !== undefined && req.bridge !== null) {
    if (!isObject(req.bridge)) throw invalid("bridge must be { workspaceId }", { field: "bridge" });
    // A runner has its bridge already, for its own stub's workspace.
    if (!runner) out.bridge = { workspaceId: checkWorkspaceId(req.bridge.workspaceId) };
  }
  if (req.isolation !== undefined && req.isolation !== null) {
    if (!isIsolation(req.isolation)) {
      throw invalid(
        `isolation must be one of ${ISOLATIONS.map((i) => JSON.stringify(i)).join(", ")}, got ${JSON.stringify(req.isolation)}`,
        { field: "isolation" },
      );
    }
    if (req.isolation === "gvisor") out.isolation = "gvisor";
  }
  if (req.userNamespace !== undefined && req.userNamespace !== null) {
    if (typeof req.userNamespace !== "boolean") {
      throw invalid(`userNamespace must be true or false, got ${JSON.stringify(req.userNamespace)}`, {
        field: "userNamespace",
      });
    }
    if (!req.userNamespace) out.userNamespace = false;
  }
  if (req.syscallFilter !== undefined && req.syscallFilter !== null) {
    if (!SYSCALL_FILTERS.includes(req.syscallFilter)) {
      throw invalid(
        `syscallFilter must be one of ${SYSCALL_FILTERS.map((f) => JSON.stringify(f)).join(", ")}, got ${JSON.stringify(req.syscallFilter)}`,
        { field: "syscallFilter" },
      );
    }
    if (req.syscallFilter === "denylist") out.syscallFilter = "denylist";
  }
  if (req.gang !== undefined && req.gang !== null) out.gang = validateGangMember(req.gang);
  return out;
}

/** Image env ("K=V" list) overlaid by the request's. */
export function mergeEnv(imageEnv: readonly string[], env: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kv of imageEnv) {
    const eq = kv.indexOf("=");
    if (eq > 0) out[kv.slice(0, eq)] = kv.slice(eq + 1);
  }
  return { ...out, ...env };
}

/**
 * The image's USER when it is numeric ("1000", "1000:1000"); a name would
 * need the image's /etc/passwd, which berth does not read: refused.
 */
export function imageUser(user: string): { uid: number; gid: number } | undefined {
  if (!user) return undefined;
  return parseUser(user, "the image's USER");
}
