import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { describeError } from "../../shared/errors.ts";
import {
  createDisk,
  type DiskPaths,
  type DiskTemplate,
  type DiskUsage,
  diskPaths,
  diskPathsFor,
  isMounted,
  makeDiskTemplate,
  readDiskUsage,
  unmountDisk,
} from "./disk.ts";
import type { RuntimeLogger } from "./types.ts";

// The disks of one runtime's containers (disk.ts for one disk). A start must
// not wait for mount(8) (10-20 ms under load, most of what a disk costs), so
// a few disks are made and mounted ahead of demand in <root>/.disk-pool/; a
// start renames one into its bundle dir (the mount follows the directory:
// rename(2) moves a parent of a mount point) and a new one is made behind
// it. Pool disks outlive an agent restart (the next runtime takes them back
// when their size is still the configured one) and go with drain().

/** Scratch image a runtime formats once to learn its disks' bytes. */
const TEMPLATE_PREFIX = ".disk-template.";
const POOL_DIR = ".disk-pool";

export class ContainerDisks {
  /** Made at the first disk; see DiskTemplate. */
  private template?: Promise<DiskTemplate | undefined>;
  private readonly pool: string;
  private readonly ready: string[] = [];
  private filling?: Promise<void>;
  private draining = false;

  /** `bytes` 0: no disks (upper dirs on the host's disk); `poolSize`: disks kept ready. */
  constructor(
    private readonly root: string,
    readonly bytes: number,
    private readonly poolSize: number,
    private readonly logger?: RuntimeLogger,
  ) {
    this.pool = join(root, POOL_DIR);
  }

  /** Gives the container at `bundleDir` its mounted disk; returns where its upper and work dirs go. */
  async create(bundleDir: string): Promise<string> {
    if (this.bytes === 0) return bundleDir;
    const p = diskPathsFor(bundleDir);
    const ready = this.ready.shift();
    if (ready) {
      renameSync(ready, p.dir);
    } else {
      await this.make(p);
    }
    return p.mountPoint;
  }

  /** Where the container at `bundleDir` writes (create()'s answer, for a container already made). */
  writableDir(bundleDir: string): string {
    return this.bytes === 0 ? bundleDir : diskPathsFor(bundleDir).mountPoint;
  }

  /** Unmounts the container's disk; removing the bundle dir then deletes its image. */
  remove(bundleDir: string): Promise<void> {
    return unmountDisk(diskPathsFor(bundleDir));
  }

  usage(bundleDir: string): DiskUsage | undefined {
    return readDiskUsage(diskPathsFor(bundleDir));
  }

  /** Whether a name in the runtime's root is the disks' own (not a container's bundle dir). */
  owns(name: string): boolean {
    return name === POOL_DIR || name.startsWith(TEMPLATE_PREFIX);
  }

  /**
   * After an agent restart: takes back the ready disks a previous runtime
   * left (mounted, of the configured size), removes the rest and any
   * template scratch file it was formatting.
   */
  async recover(): Promise<void> {
    for (const name of readdirSync(this.root)) {
      if (name.startsWith(TEMPLATE_PREFIX) && name !== this.scratchName())
        rmSync(join(this.root, name), { force: true });
    }
    if (!existsSync(this.pool)) return;
    for (const name of readdirSync(this.pool)) {
      const p = diskPaths(join(this.pool, name));
      if (this.ready.includes(p.dir)) continue;
      const keep =
        this.bytes > 0 && isMounted(p) && sizeOf(p) === this.bytes && this.ready.length < this.poolSize;
      if (keep) this.ready.push(p.dir);
      else await this.discard(p);
    }
  }

  /** Makes no more disks (the runtime closed); the ready ones stay for the next runtime on this root. */
  stop(): void {
    this.draining = true;
  }

  /** Makes no more disks, and unmounts and deletes every one in the pool (the agent stops for good). */
  async drain(): Promise<void> {
    this.draining = true;
    await this.filling;
    this.ready.splice(0);
    if (!existsSync(this.pool)) return;
    for (const name of readdirSync(this.pool)) await this.discard(diskPaths(join(this.pool, name)));
  }

  /**
   * Makes disks until `poolSize` are ready, in the background. The caller
   * picks the moment: making one runs mount(8), whose spawn blocks the
   * event loop for a few ms, so not in the middle of a start.
   */
  refill(): void {
    if (this.filling || this.draining || this.ready.length >= this.poolSize) return;
    // Cleared in .finally (a microtask), never before the assignment: a fill with nothing to do ends at once.
    this.filling = this.fill().finally(() => {
      this.filling = undefined;
    });
  }

  private async fill(): Promise<void> {
    try {
      while (!this.draining && this.ready.length < this.poolSize) {
        const p = diskPaths(join(this.pool, randomBytes(6).toString("hex")));
        mkdirSync(this.pool, { recursive: true });
        try {
          await this.make(p);
        } catch (e) {
          await this.discard(p).catch(() => {});
          throw e;
        }
        if (this.draining) await this.discard(p);
        else this.ready.push(p.dir);
      }
    } catch (e) {
      // Starts make their own disks meanwhile; the next start tries again.
      this.logger?.warn({ err: describeError(e) }, "cannot make a container disk ahead of demand");
    }
  }

  private async make(p: DiskPaths): Promise<void> {
    await createDisk(p, this.bytes, await this.templateOnce());
  }

  private async discard(p: DiskPaths): Promise<void> {
    await unmountDisk(p);
    rmSync(p.dir, { recursive: true, force: true });
  }

  private scratchName(): string {
    return `${TEMPLATE_PREFIX}${process.pid}.img`;
  }

  private templateOnce(): Promise<DiskTemplate | undefined> {
    this.template ??= makeDiskTemplate(join(this.root, this.scratchName()), this.bytes).then((t) => {
      if (!t) this.logger?.warn({}, "cannot read a formatted disk's extents: each container disk runs mkfs");
      return t;
    });
    return this.template;
  }
}

function sizeOf(p: DiskPaths): number | undefined {
  try {
    return statSync(p.image).size;
  } catch {
    return undefined;
  }
}
