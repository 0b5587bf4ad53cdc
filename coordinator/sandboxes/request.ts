// From a `sandbox` or `pod` stub to the one container it runs: resources,
// image, secrets and code as for a function's runner (runner-request.ts), but
// the stub's entrypoint instead of the runner, its ports and its egress.

import { stubVolumeMounts } from "../../shared/volumes.ts";
import { DatabaseLabels } from "../../shared/databases.ts";
import type { RunContainerRequest } from "../../api/index.ts";
import { type EgressPolicy, resolveEgressPolicy } from "../../shared/egress.ts";
import { BerthError, invalid } from "../../shared/errors.ts";
import { RunnerLabels, type StubExtra, baseStubType } from "../../shared/tasks.ts";
import { cpuMillicores, gpuWish } from "../scheduler/index.ts";
import type { StubRecord } from "../containers/index.ts";
import type { SandboxKind } from "./store.ts";

const MiB = 1024 * 1024;

/**
 * Labels of sandbox and pod containers. They carry no `berth.managed`, so the
 * container manager neither adopts nor reaps them; SandboxService does.
 */
export const SandboxLabels = {
  /** "1" on every sandbox and pod container (listContainers filters by it). */
  sandbox: "berth.sandbox",
  /** "sandbox" or "pod". */
  kind: "berth.sandbox_kind",
  /**
   * "1" where pid 1 is only a keep-alive: the agent may run its process
   * server there instead (agent/host/sandbox-init.ts, when the image has
   * python3), which starts processes much faster than runc exec.
   */
  init: "berth.sandbox_init",
} as const;

/** Spec default of a sandbox's idle lifetime (docs/sandboxes.md, Lifetime). */
export const DEFAULT_SANDBOX_TTL_SECONDS = 600;

/**
 * A sandbox's container does nothing by itself: it stays up for the processes
 * run in it. `sleep` where the image has it (in a loop so SIGTERM ends it at
 * once), else Python.
 */
export const KEEP_ALIVE_ARGS = [
  "/bin/sh",
  "-c",
  'trap "exit 0" TERM INT; if command -v sleep >/dev/null 2>&1; then while :; do sleep 3600 & wait $!; done; else exec python3 -c "import signal; signal.signal(signal.SIGTERM, lambda *a: exit(0)); signal.pause()"; fi',
];

/**
 * A stub's extra with the environment the SDK may send (Pod/Sandbox `env=`),
 * and, on a managed database's pod, the ports its agent finds it by
 * (shared/databases.ts).
 */
export type SandboxStubExtra = StubExtra & {
  env?: Record<string, string>;
  database?: { local_port: number; port: number };
};

export function sandboxKindOf(stub: Pick<StubRecord, "id" | "type">): SandboxKind {
  const t = baseStubType(stub.type);
  if (t === "sandbox" || t === "pod") return t;
  throw invalid(
    `stub ${stub.id} is a ${stub.type} stub; sandboxes and pods start from a stub of type sandbox or pod`,
    {
      stub_id: stub.id,
      type: stub.type,
    },
  );
}

/** The stub's egress policy; invalid_request (before anything starts) for a bad combination. */
export function stubEgress(stub: Pick<StubRecord, "extra">): EgressPolicy {
  return resolveEgressPolicy({
    block_network: stub.extra.block_network ?? false,
    allow_list: stub.extra.allow_list ?? null,
  });
}

/** -1 (never) or a positive number of seconds; a sandbox's default is 600, a pod's -1. */
export function checkTtl(ttl: number): number {
  if (!Number.isInteger(ttl) || (ttl !== -1 && ttl < 1))
    throw invalid(`ttl_seconds must be -1 (never time out) or a whole number of seconds >= 1, got ${ttl}`, {
      ttl_seconds: ttl,
    });
  return ttl;
}

export function stubTtl(stub: Pick<StubRecord, "extra">, kind: SandboxKind, defaultTtl: number): number {
  if (kind === "pod") return -1;
  return checkTtl(stub.extra.ttl_seconds ?? defaultTtl);
}

export function checkPorts(ports: readonly number[] | undefined): number[] {
  const out: number[] = [];
  for (const p of ports ?? []) {
    if (!Number.isInteger(p) || p < 1 || p > 65535)
      throw invalid(`port ${p} is not a TCP port 1..65535`, { port: p });
    if (!out.includes(p)) out.push(p);
  }
  return out;
}

export interface SandboxRequestInput {
  stub: StubRecord;
  kind: SandboxKind;
  containerId: string;
  gpuType: string | undefined;
  /** The image reference on the chosen agent (a filesystem snapshot's ref, or the stub's). */
  image: string | undefined;
  egress: EgressPolicy;
  ports: number[];
  /** Overrides the stub's entrypoint (pod create(entrypoint=...)). */
  entrypoint?: string[];
  secretEnv?: Record<string, string>;
}

export function sandboxRequest(i: SandboxRequestInput): RunContainerRequest {
  const { stub, kind } = i;
  const extra = stub.extra as SandboxStubExtra;
  const entrypoint = i.entrypoint && i.entrypoint.length > 0 ? i.entrypoint : (extra.entrypoint ?? []);
  if (kind === "pod" && entrypoint.length === 0)
    throw invalid("a pod needs an entrypoint: give it in Pod(entrypoint=[...]) or create(entrypoint=[...])", {
      stub_id: stub.id,
    });
  const req: RunContainerRequest = {
    id: i.containerId,
    args: entrypoint.length > 0 ? [...entrypoint] : [...KEEP_ALIVE_ARGS],
    cpu: cpuMillicores(stub) / 1000,
    memoryBytes: stub.config.runtime.memory * MiB,
    labels: {
      [RunnerLabels.stubId]: stub.id,
      [RunnerLabels.workspaceId]: stub.workspaceId,
      [SandboxLabels.sandbox]: "1",
      [SandboxLabels.kind]: kind,
      ...(entrypoint.length === 0 ? { [SandboxLabels.init]: "1" } : {}),
      ...(extra.database
        ? {
            [DatabaseLabels.localPort]: String(extra.database.local_port),
            [DatabaseLabels.serverPort]: String(extra.database.port),
          }
        : {}),
    },
    egress: i.egress,
    exposedPorts: i.ports,
    // Output, Queue, Map and Signal over the agent socket, as in a function's container.
    bridge: { workspaceId: stub.workspaceId },
  };
  if (i.image) req.image = i.image;
  if (extra.isolation === "gvisor") req.isolation = "gvisor";
  const gpu = gpuWish(stub);
  if (gpu.count > 0)
    req.gpu = {
      count: gpu.count,
      types: i.gpuType ? [i.gpuType] : gpu.types,
      ...(gpu.memoryMiB !== undefined ? { memoryMiB: gpu.memoryMiB } : {}),
    };
  if (extra.code_sha256) req.code = { sha256: extra.code_sha256 };
  const volumes = stubVolumeMounts(stub.workspaceId, stub.config.volumes);
  if (volumes.length > 0) req.volumes = volumes;
  const env = { ...(extra.env ?? {}), ...(i.secretEnv ?? {}) };
  if (Object.keys(env).length > 0) req.env = env;
  return req;
}

/** A sandbox refused because it ended: the SDK's SandboxConnectionError. */
export function terminatedError(id: string, reason?: string | null): BerthError {
  return new BerthError(
    "sandbox_terminated",
    `sandbox ${id} was terminated${reason ? ` (${reason})` : ""}; create or connect to another`,
    { sandbox_id: id },
  );
}
