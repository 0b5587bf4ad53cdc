// ContainerSnapshotApi: a container's writes committed as a new image, and
// memory checkpoints with runc/CRIU. A memory snapshot is a filesystem
// commit (the restored processes need the files they had) plus `runc
// checkpoint`'s images, kept under <dir>/<snapshotId>/ with snapshot.json.
// Every step writes into a temp dir renamed into place last, so a failure
// leaves no half snapshot; a commit only names its image once it is whole.

import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { lstat, opendir, rm } from "node:fs/promises";
import { join } from "node:path";
import { BerthError, describeError, notFound } from "../../shared/errors.ts";
import { imageSummary } from "../host/image-ops.ts";
import type { ImageInfo } from "../images/index.ts";
import type { IdMap } from "../runtime/index.ts";
import type { ContainerStatus, ImageSummary, RunContainerRequest } from "../../api/index.ts";
import type { ContainerSnapshotApi } from "../../api/index.ts";
import { overlayDirsOf, writeUpperLayer } from "./layer.ts";
import {
  type CheckpointSupport,
  CriuCheck,
  checkpointUnavailable,
  type RuncTarget,
  runcCheckpoint,
  runcState,
  whilePaused,
} from "./runc-ops.ts";

const SNAPSHOT_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** What snapshots need of the container host. */
export interface SnapshotHost {
  runc: RuncTarget;
  /** The image digest a container runs and whether it runs now; throws not_found for an unknown id. */
  container(id: string): {
    imageDigest: string;
    running: boolean;
    runtime?: string;
    ociId?: string;
    /** Its user namespace's id range: its files are stored shifted into it, and the layer shifts them back. */
    idMap?: IdMap;
  };
  images: {
    commitLayer(base: string, layerTar: string, opts: { name: string; comment?: string }): Promise<ImageInfo>;
    remove(ref: string): Promise<unknown>;
  };
  /** Starts a container from `req` whose processes `runc restore` brings back from `checkpointDir`. */
  restore(checkpointDir: string, req: RunContainerRequest): Promise<ContainerStatus>;
}

export interface SnapshotOptions {
  /** Where snapshots and commit scratch dirs live. */
  dir: string;
  /** @default "criu" */
  criu?: string;
}

interface SnapshotRecord {
  version: 1;
  snapshotId: string;
  containerId: string;
  /** The committed image the restore starts from. */
  image: string;
  createdAt: number;
}

/** The image reference a memory snapshot's files are committed under. */
export const snapshotImageRef = (snapshotId: string) => `localhost/berth-snapshot:${snapshotId}`;

async function treeBytes(dir: string): Promise<number> {
  let total = 0;
  for await (const ent of await opendir(dir)) {
    const p = join(dir, ent.name);
    total += ent.isDirectory() ? await treeBytes(p) : (await lstat(p)).size;
  }
  return total;
}

export class ContainerSnapshots implements ContainerSnapshotApi {
  private readonly dir: string;
  private readonly scratch: string;
  private readonly criu: CriuCheck;

  constructor(
    private readonly host: SnapshotHost,
    opts: SnapshotOptions,
  ) {
    this.dir = opts.dir;
    this.scratch = join(opts.dir, ".tmp");
    this.criu = new CriuCheck(opts.criu ?? "criu");
    // Scratch left by a killed agent is never a snapshot.
    rmSync(this.scratch, { recursive: true, force: true });
    mkdirSync(this.scratch, { recursive: true, mode: 0o700 });
  }

  async commitFilesystem(containerId: string, ref: string): Promise<ImageSummary> {
    return imageSummary(await this.commit(containerId, ref));
  }

  private async commit(containerId: string, ref: string): Promise<ImageInfo> {
    if (typeof ref !== "string" || ref.trim() === "") {
      throw new BerthError("invalid_request", "commitFilesystem needs the reference the image is known by");
    }
    const c = this.host.container(containerId);
    if (c.runtime !== undefined && c.runtime !== "runc") {
      // Its state and overlay are known to its own runtime, and memory checkpoints are runc's (CRIU).
      throw new BerthError(
        "failed_precondition",
        `container ${containerId} runs under ${c.runtime}: snapshots are taken of runc containers only`,
      );
    }
    // A pre-warmed runner's container is known to runc by the name it started under.
    const runcId = c.ociId ?? containerId;
    const state = await runcState(this.host.runc, runcId);
    const overlay = overlayDirsOf(state.rootfs);
    const work = mkdtempSync(join(this.scratch, "commit-"));
    try {
      const tar = join(work, "layer.tar");
      const write = () => writeUpperLayer(overlay, tar, work, c.idMap);
      // Frozen while read, so the layer is one moment's files.
      if (c.running && state.status === "running") await whilePaused(this.host.runc, runcId, write);
      else await write();
      return await this.host.images.commitLayer(c.imageDigest, tar, {
        name: ref,
        comment: `files of container ${containerId}`,
      });
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  checkpointSupport(): Promise<CheckpointSupport> {
    return this.criu.check();
  }

  private async requireCriu(): Promise<void> {
    const support = await this.criu.check();
    if (!support.supported) throw checkpointUnavailable(support);
  }

  async checkpointMemory(
    containerId: string,
    snapshotId: string,
  ): Promise<{ snapshotId: string; sizeBytes: number }> {
    if (typeof snapshotId !== "string" || !SNAPSHOT_ID.test(snapshotId)) {
      throw new BerthError(
        "invalid_request",
        `snapshot id must be letters, digits, "_", "." or "-" (at most 128), got ${JSON.stringify(snapshotId)}`,
      );
    }
    const c = this.host.container(containerId);
    await this.requireCriu();
    if (!c.running) throw new BerthError("failed_precondition", `container ${containerId} is not running`);
    const final = join(this.dir, snapshotId);
    if (existsSync(final)) throw new BerthError("conflict", `snapshot ${snapshotId} already exists`);
    const work = mkdtempSync(join(this.scratch, "checkpoint-"));
    const image = snapshotImageRef(snapshotId);
    let committed = false;
    try {
      await this.commit(containerId, image);
      committed = true;
      const imagePath = join(work, "checkpoint");
      mkdirSync(imagePath);
      mkdirSync(join(work, "criu-work"));
      await runcCheckpoint(this.host.runc, c.ociId ?? containerId, {
        imagePath,
        workPath: join(work, "criu-work"),
      });
      const record: SnapshotRecord = { version: 1, snapshotId, containerId, image, createdAt: Date.now() };
      writeFileSync(join(work, "snapshot.json"), JSON.stringify(record));
      await rm(join(work, "criu-work"), { recursive: true, force: true });
      renameSync(work, final);
    } catch (e) {
      await rm(work, { recursive: true, force: true });
      if (committed) await this.host.images.remove(image).catch(() => {});
      throw e;
    }
    return { snapshotId, sizeBytes: await treeBytes(join(final, "checkpoint")) };
  }

  async restoreMemory(snapshotId: string, req: RunContainerRequest): Promise<ContainerStatus> {
    const record = this.read(snapshotId);
    await this.requireCriu();
    return this.host.restore(join(this.dir, snapshotId, "checkpoint"), { ...req, image: record.image });
  }

  private read(snapshotId: string): SnapshotRecord {
    if (typeof snapshotId !== "string" || !SNAPSHOT_ID.test(snapshotId))
      throw notFound(`snapshot ${snapshotId}`);
    try {
      const r = JSON.parse(
        readFileSync(join(this.dir, snapshotId, "snapshot.json"), "utf8"),
      ) as SnapshotRecord;
      if (r.version !== 1 || typeof r.image !== "string") throw new Error("unknown format");
      return r;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") throw notFound(`snapshot ${snapshotId}`);
      throw new BerthError("internal", `snapshot ${snapshotId} is unreadable: ${describeError(e)}`);
    }
  }
}
