import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, rmdirSync } from "node:fs";
import { join } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { BindMount } from "./types.ts";

// User namespaces (docs/runtime.md, "User namespaces"): each container's root
// is an unprivileged host uid, from a range of 65,536 ids no other live
// container on this host holds. What containers share on disk — image layers,
// code, volumes — stays owned as it is (root), and each container sees it
// through an idmapped mount (mount_setattr(2) MOUNT_ATTR_IDMAP, Linux 5.12+;
// overlayfs takes idmapped lower layers from 5.19) that shows on-disk id k as
// the container's k. Node has no mount_setattr and runc 1.1 cannot idmap a
// mount, so a python3 helper (python3 is one of the agent's packages) makes
// them with ctypes (idmap-helper.ts).

/** A container's id mapping: ids 0..size-1 inside are hostId..hostId+size-1 outside (uids and gids alike). */
export interface IdMap {
  hostId: number;
  size: number;
}

/** Ids per container: a whole 16-bit range, as the images' files expect (nobody is 65534). */
export const ID_MAP_SIZE = 65_536;
/** The first host id handed out: above the ids of host users and the usual subuid ranges. */
export const FIRST_HOST_ID = 2 ** 24;
/** Ranges stay below 2^31: some tools read ids as signed 32-bit numbers. */
export const MAX_ID_MAPS = Math.floor((2 ** 31 - FIRST_HOST_ID) / ID_MAP_SIZE);

/** The lowest range no map in `used` holds. */
export function pickIdMap(used: Iterable<IdMap>): IdMap {
  const taken = new Set<number>();
  for (const m of used) taken.add(m.hostId);
  for (let i = 0; i < MAX_ID_MAPS; i++) {
    const hostId = FIRST_HOST_ID + i * ID_MAP_SIZE;
    if (!taken.has(hostId)) return { hostId, size: ID_MAP_SIZE };
  }
  throw new BerthError(
    "resource_exhausted",
    `all ${MAX_ID_MAPS} user-namespace id ranges of this host are in use`,
  );
}

/** The id a container with `map` knows as `hostId`, or undefined when the host id is outside its range. */
export function idInside(map: IdMap, hostId: number): number | undefined {
  const k = hostId - map.hostId;
  return k >= 0 && k < map.size ? k : undefined;
}

/** One idmapped mount to make: `source`'s tree shown at `target` through the container's mapping. */
export interface IdmappedMount {
  source: string;
  target: string;
  readonly: boolean;
}

/** A tmpfs the mounter makes (mount(2) flags: MS_NOSUID 2, MS_NODEV 4, MS_NOEXEC 8). */
export interface TmpfsMount {
  target: string;
  flags: number;
  data: string;
}

/** Makes idmapped mounts (targets created as empty dirs) and host tmpfs mounts: idmap-helper.ts. */
export interface IdmapMounter {
  mount(map: IdMap, mounts: readonly IdmappedMount[], tmpfs?: readonly TmpfsMount[]): Promise<void>;
}

/**
 * Where the roots of a runtime's user-namespaced containers are mounted:
 * runc mounts the root from inside the namespace, where root is a stranger
 * to the host's root-owned dirs, so every dir on the way must let others
 * pass (0711: no listing). The agent's own data dir may sit under a private
 * one (a home dir, a test's temp dir); /run/berth is berth's, one subdir
 * per runtime root.
 */
export function sharedRootfsDir(runtimeRoot: string): string {
  const dir = sharedRootfsPath(runtimeRoot);
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  for (const d of ["/run/berth", "/run/berth/rootfs", dir]) chmodSync(d, 0o711);
  return dir;
}

/** sharedRootfsDir's path, without making it. */
export const sharedRootfsPath = (runtimeRoot: string): string =>
  join("/run/berth/rootfs", createHash("sha256").update(runtimeRoot).digest("hex").slice(0, 16));

/** Where a container's idmapped mounts sit, under its bundle dir (removed with the container). */
export const idmappedDir = (bundleDir: string) => join(bundleDir, "idmapped");

/**
 * Shows the container's image layers (read-only) and its idmapped bind
 * mounts' sources through `map`, under the bundle's idmapped dir; returns
 * the lower dirs and mounts to use instead.
 */
export async function mapSharedTrees(
  mounter: IdmapMounter,
  bundleDir: string,
  map: IdMap,
  lowerDirs: readonly string[],
  mounts: readonly BindMount[],
  opts: { prefix?: string; scratch?: { tmpBytes: number; shmBytes: number } } = {},
): Promise<{ lowerDirs: string[]; mounts: BindMount[]; scratch?: HostScratch }> {
  const prefix = opts.prefix ?? "";
  const dir = idmappedDir(bundleDir);
  const todo: IdmappedMount[] = [];
  const lowers = lowerDirs.map((source, i) => {
    const target = join(dir, `${prefix}l${i}`);
    todo.push({ source, target, readonly: true });
    return target;
  });
  const binds = mounts.map((m, i) => {
    if (!m.idmapped) return m;
    const target = join(dir, `${prefix}m${i}`);
    todo.push({ source: m.source, target, readonly: m.readonly === true });
    return { ...m, source: target };
  });
  const scratch = opts.scratch ? scratchMounts(dir, map, opts.scratch) : undefined;
  await mounter.mount(map, todo, scratch?.tmpfs);
  return { lowerDirs: lowers, mounts: binds, ...(scratch ? { scratch: scratch.paths } : {}) };
}

/** A container's /tmp and /dev/shm when it has an id range: tmpfs mounts the host made (idmap.ts mountScratch). */
export interface HostScratch {
  tmp: string;
  shm: string;
}

/**
 * /tmp and /dev/shm of a user-namespaced container, mounted by the host
 * rather than by runc inside the namespace: a tmpfs mounted there belongs to
 * that namespace, and the agent's own writes into it (the files API, as
 * root) would have no id in it (EOVERFLOW). Their roots are root's inside;
 * their pages count against the container's memory as before (a page is
 * charged to whoever touches it first).
 */
function scratchMounts(
  dir: string,
  map: IdMap,
  sizes: { tmpBytes: number; shmBytes: number },
): { paths: HostScratch; tmpfs: TmpfsMount[] } {
  const paths = { tmp: join(dir, "tmp"), shm: join(dir, "shm") };
  const owner = `uid=${map.hostId},gid=${map.hostId},mode=1777`;
  const [NOSUID, NODEV, NOEXEC] = [2, 4, 8];
  return {
    paths,
    tmpfs: [
      { target: paths.tmp, flags: NOSUID | NODEV, data: `size=${sizes.tmpBytes},${owner}` },
      { target: paths.shm, flags: NOSUID | NODEV | NOEXEC, data: `size=${sizes.shmBytes},${owner}` },
    ],
  };
}

/** Removes `dir`, then `parent` if that left it empty (the runtime's dir under /run/berth/rootfs). */
export function removeEmptyDirs(dir: string, parent: string): void {
  for (const d of [dir, parent]) {
    try {
      rmdirSync(d);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") continue;
      if (code === "ENOTEMPTY" || code === "EEXIST") return;
      throw e;
    }
  }
}

/** The idmapped bind mounts among `mounts`, deepest destination first (a path inside is in the first it is under). */
export function sharedTreesOf(mounts: readonly BindMount[]): { destination: string; source: string }[] {
  return mounts
    .filter((m) => m.idmapped)
    .map((m) => ({ destination: m.destination, source: m.source }))
    .sort((a, b) => b.destination.length - a.destination.length);
}
