// What ContainerHost hands agent/files and agent/snapshots: where a running
// container's root is, the image store's commit, and a runtime step that
// restores from a checkpoint instead of starting afresh.

import { join } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { ImageInfo } from "../images/index.ts";
import type { ContainerStatus, ImageSummary, RunContainerRequest } from "../../api/index.ts";
import type {
  ContainerFilesApi,
  ContainerSnapshotApi,
  FileInfo,
  FileSearchMatch,
  ReplaceResult,
  SandboxProcessApi,
} from "../../api/index.ts";
import { ProcessDelegation } from "../../api/index.ts";
import type { ContainerInfo, ContainerSpec } from "../runtime/index.ts";
import { ContainerFiles } from "../files/index.ts";
import { ContainerSnapshots, type SnapshotHost } from "../snapshots/index.ts";
import type { HostImages, HostRuntime } from "./options.ts";

/** The runtime's last start step: `runc run`, or `runc restore` for a memory snapshot. */
export type StartStep = (spec: ContainerSpec) => Promise<ContainerInfo>;

/**
 * A runtime that can start a container by `runc restore` from a checkpoint
 * (CRIU images in checkpointDir) instead of `runc run`.
 */
export interface RestoringRuntime extends HostRuntime {
  restore?(spec: ContainerSpec, checkpointDir: string): Promise<ContainerInfo>;
}

export function restoreStep(runtime: RestoringRuntime, checkpointDir: string): StartStep {
  const restore = runtime.restore?.bind(runtime);
  if (!restore) {
    throw new BerthError(
      "not_implemented",
      "this agent's container runtime cannot restore checkpoints (runc restore)",
    );
  }
  return (spec) => restore(spec, checkpointDir);
}

type CommitStore = SnapshotHost["images"];

/** The image store behind a host, when it can commit layers (agent/images' ImageStore can). */
export function commitStore(images: HostImages): CommitStore {
  const s = images as HostImages & Partial<{ commitLayer: CommitStore["commitLayer"] }>;
  return {
    commitLayer: (base, layerTar, opts): Promise<ImageInfo> => {
      if (typeof s.commitLayer !== "function") {
        throw new BerthError("not_implemented", "this agent's image store cannot commit images");
      }
      return s.commitLayer(base, layerTar, opts);
    },
    remove: (ref) => images.remove(ref),
  };
}

/**
 * A running container's root as its processes see it (their mounts
 * included). Under gVisor the host pid is the sandbox's kernel, whose root
 * is not the container's: there it is the container's overlay on the host
 * (`hostRootfs`), without the bind mounts gVisor's gofer made inside.
 */
export function processRoot(id: string, info: ContainerInfo | undefined, hostRootfs?: string): string {
  if (info?.status !== "running" || !info.pid) {
    throw new BerthError("failed_precondition", `container ${id} is not running; its files went with it`);
  }
  if (info.runtime === "runsc" && hostRootfs) return hostRootfs;
  return join("/proc", String(info.pid), "root");
}

/** agent/files over a host's running containers; `known` throws not_found for an id the host has no record of. */
export function containerFilesOf(runtime: HostRuntime, known: (id: string) => void): ContainerFiles {
  return new ContainerFiles({
    rootOf: async (id) => {
      known(id);
      const info = runtime.get(id);
      return processRoot(id, info, info && runtime.execTarget(id).rootfs);
    },
    idMapOf: (id) => (runtime.get(id) ? runtime.execTarget(id).idMap : undefined),
    sharedTreesOf: (id) => (runtime.get(id) ? (runtime.execTarget(id).sharedTrees ?? []) : []),
  });
}

/** agent/snapshots over a host's containers; `imageDigestOf` throws not_found for an id the host has no record of. */
export function containerSnapshotsOf(
  runtime: HostRuntime,
  d: {
    imageDigestOf(id: string): string;
    images: HostImages;
    restore: SnapshotHost["restore"];
    /** Where snapshots are kept. */
    dir: string;
  },
): ContainerSnapshots {
  const { runc, runcRoot } = runtime.options;
  const host: SnapshotHost = {
    runc: { runc, runcRoot },
    container: (id) => {
      const info = runtime.get(id);
      const target = info ? runtime.execTarget(id) : undefined;
      return {
        imageDigest: d.imageDigestOf(id),
        running: info?.status === "running",
        runtime: info?.runtime ?? "runc",
        ...(target ? { ociId: target.ociId } : {}),
        ...(target?.idMap ? { idMap: target.idMap } : {}),
      };
    },
    images: commitStore(d.images),
    restore: d.restore,
  };
  return new ContainerSnapshots(host, { dir: d.dir });
}

/** The sandbox half of the agent's API, passed on to `files`, `snapshots` and `processes` (ContainerHost builds them; the process calls are ProcessDelegation's). */
export abstract class SandboxDelegation
  extends ProcessDelegation
  implements ContainerFilesApi, ContainerSnapshotApi, SandboxProcessApi
{
  abstract readonly files: ContainerFilesApi;
  abstract readonly snapshots: ContainerSnapshotApi;
  abstract override readonly processes: SandboxProcessApi;

  statPath(id: string, path: string): Promise<FileInfo> {
    return this.files.statPath(id, path);
  }

  listDir(id: string, path: string): Promise<FileInfo[]> {
    return this.files.listDir(id, path);
  }

  readFile(id: string, path: string, opts?: { signal?: AbortSignal }): AsyncIterable<Uint8Array> {
    return this.files.readFile(id, path, opts);
  }

  writeFile(id: string, path: string, data: AsyncIterable<Uint8Array>, opts?: { mode?: number }) {
    return this.files.writeFile(id, path, data, opts);
  }

  deleteFile(id: string, path: string): Promise<void> {
    return this.files.deleteFile(id, path);
  }

  createDirectory(id: string, path: string): Promise<FileInfo> {
    return this.files.createDirectory(id, path);
  }

  deleteDirectory(id: string, path: string): Promise<void> {
    return this.files.deleteDirectory(id, path);
  }

  findInFiles(id: string, path: string, pattern: string): Promise<FileSearchMatch[]> {
    return this.files.findInFiles(id, path, pattern);
  }

  replaceInFiles(id: string, path: string, oldString: string, newString: string): Promise<ReplaceResult[]> {
    return this.files.replaceInFiles(id, path, oldString, newString);
  }

  commitFilesystem(id: string, ref: string): Promise<ImageSummary> {
    return this.snapshots.commitFilesystem(id, ref);
  }

  checkpointSupport(): Promise<{ supported: boolean; reason?: string }> {
    return this.snapshots.checkpointSupport();
  }

  checkpointMemory(id: string, snapshotId: string): Promise<{ snapshotId: string; sizeBytes: number }> {
    return this.snapshots.checkpointMemory(id, snapshotId);
  }

  restoreMemory(snapshotId: string, req: RunContainerRequest): Promise<ContainerStatus> {
    return this.snapshots.restoreMemory(snapshotId, req);
  }
}
