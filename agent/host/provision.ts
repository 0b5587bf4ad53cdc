// The part of ContainerHost's start that comes after the reservation: image
// and network, GPUs, ports, /etc/hosts, the task bridge, the spec, the host
// record and the runtime's start. Each step that leaves something behind
// registers its undo first, so a failure anywhere undoes exactly what was done.

import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BerthError, describeError, isBerthError } from "../../shared/errors.ts";
import type { GpuDevice } from "../../shared/fleet.ts";
import type { GpuInjection } from "../capacity/index.ts";
import type { ContainerStatus } from "../../api/index.ts";
import type { BindMount } from "../runtime/index.ts";
import { buildContainerSpec, defaultHostname, hostsFileText, usesUserNamespace } from "./container-spec.ts";
import type { ResolvedContainerHostOptions } from "./options.ts";
import { type HostRecord, newHostRecord, recordStatus } from "./records.ts";
import { imageUser, type ResolvedRunRequest } from "./request.ts";
import { applyGang } from "./gang.ts";
import { applyRunner, type RunnerBridges } from "./runner.ts";
import type { RestoringRuntime, StartStep } from "./sandbox.ts";
import type { SandboxInits } from "./sandbox-init.ts";
import { injectGpus, startupEnder } from "./startup.ts";
import { RunnerPaths } from "../../shared/tasks.ts";
import type { BucketMounts } from "../volumes/buckets.ts";
import { volumeBindMounts } from "../volumes/volumes.ts";

/** What of ContainerHost the start steps use. */
export interface ProvisionDeps {
  options: ResolvedContainerHostOptions;
  runtime: RestoringRuntime;
  bridges: RunnerBridges;
  inits: SandboxInits;
  /** s3fs mounts of cloud buckets (agent/volumes/buckets.ts). */
  buckets: BucketMounts;
  /** Where each container's /etc/hosts is written, by id. */
  hostsDir: string;
  /** Writes the record and makes the container known by it. */
  keep(record: HostRecord): void;
  /** Undoes keep(), and frees the reservation. */
  forget(id: string): void;
  /** Frees the reservation (CPU, memory, GPUs): the first thing done when a step fails. */
  free(id: string): void;
}

/** A request whose resources are reserved, with what was checked on the way. */
export interface ReservedStart {
  req: ResolvedRunRequest;
  gpus: GpuDevice[];
  mounts: BindMount[];
  /** The unpacked code tree (what /mnt/code shows), when the request has `code`. */
  codeDir: string | undefined;
  /** The overlay layer holding that tree at mnt/code: the container's root gets it as a lower dir. */
  codeLayer?: string;
}

/** Re-throws a step's failure saying which step it was, keeping its code and details. */
function stepFailed(id: string, step: string, e: unknown): BerthError {
  const code = isBerthError(e) ? e.code : "internal";
  const details = isBerthError(e) ? e.details : undefined;
  return new BerthError(code, `container ${id}: ${step} failed: ${describeError(e)}`, details);
}

/** The start-up CPU cap of a runner asking for `cpu` cores; undefined for none. */
function runnerStartupCpu(d: ProvisionDeps, cpu: number): number | undefined {
  const boost = d.options.runnerStartupCpu;
  return d.runtime.endStartupCpu && boost > cpu ? boost : undefined;
}

/**
 * Who owns a container's cloud buckets on the host (s3fs mounts them before
 * the container exists): its user, shifted into its id range when it runs in
 * a user namespace (container-spec.ts decides that; the range is reserved now).
 */
function bucketOwner(
  d: ProvisionDeps,
  req: ResolvedRunRequest,
  user: { uid: number; gid: number } | undefined,
): { uid: number; gid: number } | undefined {
  if (req.buckets.length === 0 || !usesUserNamespace(req) || !d.runtime.reserveIdMap) return user;
  const map = d.runtime.reserveIdMap(req.id);
  return { uid: map.hostId + (user?.uid ?? 0), gid: map.hostId + (user?.gid ?? 0) };
}

/** Runs the start steps (`start` last); on a failure, frees the reservation and undoes them. */
export async function provisionContainer(
  d: ProvisionDeps,
  r: ReservedStart,
  start: StartStep,
): Promise<ContainerStatus> {
  const { options, runtime } = d;
  const log = options.logger;
  const { req, gpus, mounts, codeDir, codeLayer } = r;
  const { id } = req;
  const undo: { what: string; fn: () => unknown }[] = [];
  let step = "pulling the image";
  try {
    const creds = req.credentials && {
      kind: "basic" as const,
      source: "generic" as const,
      ...req.credentials,
    };
    // The image and the network are independent and both on the start path:
    // get them side by side, and settle both before undoing either.
    undo.push({ what: "network", fn: () => options.network.detach(id) });
    const [pulled, attached] = await Promise.allSettled([
      options.images.pull(req.image, creds ? { credentials: creds } : {}),
      options.network.attach(id, req.egress),
    ]);
    if (pulled.status === "rejected") throw pulled.reason;
    step = "attaching the network";
    if (attached.status === "rejected") throw attached.reason;
    const image = pulled.value;
    const net = attached.value;
    if (req.gang) {
      // Its gang's private network across hosts; detach (the network undo above) takes it out again.
      step = `joining gang ${req.gang.id} (rank ${req.gang.rank} of ${req.gang.size})`;
      if (!options.network.joinGang)
        throw new BerthError("failed_precondition", "this agent's network does not run gang members");
      await options.network.joinGang(id, req.gang);
    }
    step = "marking the image in use";
    options.images.markInUse(image.digest, id);
    undo.push({ what: "image in-use mark", fn: () => options.images.release(image.digest, id) });
    let injection: GpuInjection | undefined;
    if (gpus.length > 0) {
      step = `preparing GPUs ${gpus.map((g) => g.uuid).join(", ")}`;
      injection = await injectGpus(options.gpuInjector!, log, id, gpus, req.gpu?.memoryMiB);
    }
    step = "opening exposed ports";
    for (const port of req.exposedPorts) await options.network.allowInbound(id, port);
    step = "writing /etc/hosts";
    const hostsFile = join(d.hostsDir, id);
    undo.push({ what: "hosts file", fn: () => rmSync(hostsFile, { force: true }) });
    writeFileSync(hostsFile, hostsFileText(req.hostname ?? defaultHostname(id), net.ipv4, net.ipv6), {
      mode: 0o644,
    });
    let bridgeDir: string | undefined;
    const startupCpu = req.runner ? runnerStartupCpu(d, req.cpu) : undefined;
    const endStartup =
      startupCpu === undefined ? undefined : startupEnder(runtime, log, id, options.runnerStartupMs);
    if (req.runner) {
      step = "opening the task bridge";
      undo.push({ what: "task bridge", fn: () => d.bridges.close(id) });
      bridgeDir = await d.bridges.open(id, req.runner, endStartup?.now, req.gang?.rank);
    } else if (req.bridge) {
      step = "opening the workspace bridge";
      undo.push({ what: "workspace bridge", fn: () => d.bridges.close(id) });
      bridgeDir = await d.bridges.openWorkspace(id, req.bridge.workspaceId);
    }
    step = "building the container spec";
    const run = applyRunner(applyGang(req), req.runner, { codeDir, bridgeDir, sdkDir: options.sdkDir });
    step = "mounting volumes";
    const cwd = run.req.cwd ?? (image.config.workingDir || "/");
    const codeParent = codeDir ? [{ destination: RunnerPaths.code, source: codeDir }] : [];
    const volumes = volumeBindMounts(req.volumes, options.volumeRoot, cwd, codeParent);
    step = "mounting cloud buckets";
    undo.push({ what: "cloud bucket mounts", fn: () => d.buckets.unmount(id) });
    const user = run.req.user ?? imageUser(image.config.user);
    const buckets = await d.buckets.mount(id, req.buckets, cwd, bucketOwner(d, run.req, user), codeParent);
    step = "building the container spec";
    const spec = buildContainerSpec({
      req: run.req,
      image,
      mounts: [...mounts, ...run.mounts, ...volumes, ...buckets],
      net,
      hostsFile,
      gpu: injection,
      ...(codeLayer ? { codeLayer } : {}),
    });
    if (startupCpu !== undefined) spec.startupCpu = startupCpu;
    undo.push({ what: "sandbox init directory", fn: () => d.inits.close(id) });
    d.inits.prepare(spec, options.sdkDir);
    step = "saving the host record";
    const record = newHostRecord(run.req, image, gpus, net);
    undo.push({ what: "host record", fn: () => d.forget(id) });
    d.keep(record);
    step = "starting the container";
    const info = await start(spec);
    endStartup?.arm();
    return recordStatus(record, runtime.get(id) ?? info);
  } catch (e) {
    d.free(id);
    d.runtime.releaseIdMap?.(id);
    for (const u of undo.reverse()) {
      try {
        await u.fn();
      } catch (c) {
        log.error({ id, undo: u.what, err: describeError(c) }, "undoing a failed start");
      }
    }
    throw stepFailed(id, step, e);
  }
}
