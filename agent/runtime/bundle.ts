/**
 * What a container's bundle dir holds besides its state files, built before
 * runc starts and taken apart after it is gone: config.json, the container's
 * own disk, the root overlay on it, the idmapped views of shared trees
 * (layers, volumes) for a user namespace, and the code slot.
 */
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { mountOnSlot, prepareSlot, removeSlot } from "./code-slot.ts";
import type { ContainerDisks } from "./disks.ts";
import { type IdMap, type IdmapMounter, idmappedDir, mapSharedTrees, removeEmptyDirs } from "./idmap.ts";
import { buildOciSpec, type HostFacts } from "./oci-spec.ts";
import { mountOverlay, overlayPathsFor, unmountOverlay } from "./rootfs.ts";
import type { ResolvedContainerSpec } from "./spec.ts";
import { type ContainerMeta, type ContainerPaths, rootfsOf } from "./state.ts";

/** Writes config.json and mounts the root overlay on a new disk; the caller removes the bundle if this throws. */
export async function buildBundle(
  paths: ContainerPaths,
  meta: ContainerMeta,
  d: { host: HostFacts; disks: ContainerDisks; idmaps: IdmapMounter },
): Promise<void> {
  const { host, disks } = d;
  const spec: ResolvedContainerSpec = meta.spec;
  const idMap = meta.idMap;
  // A code slot is a shared mount of the bundle's; the container sees it as a slave (code-slot.ts).
  const slot = spec.codeSlot
    ? [
        {
          source: await prepareSlot(paths.dir),
          destination: spec.codeSlot,
          readonly: false,
          options: ["rslave"],
        },
      ]
    : [];
  const trees = idMap
    ? await mapSharedTrees(d.idmaps, paths.dir, idMap, spec.lowerDirs, spec.mounts, { scratch: spec })
    : { lowerDirs: spec.lowerDirs, mounts: spec.mounts };
  const oci = buildOciSpec({ ...spec, mounts: [...trees.mounts, ...slot] }, host, idMap, trees.scratch);
  if (meta.rootfs) oci.root.path = meta.rootfs;
  writeFileSync(paths.config, JSON.stringify(oci));
  // The container's own disk (its quota) holds the overlay's upper and work dirs.
  const writable = await disks.create(paths.dir);
  await mountOverlay(overlayPathsFor(paths.dir, trees.lowerDirs, writable, rootfsOf(meta, paths.dir)));
}

/**
 * Mounts `lowerDir` at a running container's code slot, writable through an
 * overlay whose upper dir is on the container's own disk; seen through the
 * container's id range when it has one.
 */
export async function mountCodeInBundle(
  dir: string,
  idMap: IdMap | undefined,
  lowerDir: string,
  d: { disks: ContainerDisks; idmaps: IdmapMounter },
): Promise<void> {
  const { disks } = d;
  const lower = idMap
    ? (await mapSharedTrees(d.idmaps, dir, idMap, [lowerDir], [], { prefix: "code" })).lowerDirs[0]
    : lowerDir;
  await mountOnSlot(dir, lower as string, disks.writableDir(dir));
}

/**
 * Unmounts what buildBundle mounted and deletes the disk; `meta` undefined
 * (a leftover without state) falls back to the default root path. Leaves
 * the dir itself to the caller.
 */
export async function takeBundleApart(
  dir: string,
  meta: ContainerMeta | undefined,
  disks: ContainerDisks,
): Promise<void> {
  // The code slot's overlay has its upper dir on the disk too: it goes before the disk.
  await removeSlot(dir);
  const rootfs = meta ? rootfsOf(meta, dir) : join(dir, "rootfs");
  await unmountOverlay(rootfs);
  if (rootfs !== join(dir, "rootfs")) removeEmptyDirs(rootfs, dirname(rootfs));
  // The idmapped layers the overlays stood on (read-only) and volumes (idmap.ts).
  await unmountOverlay(idmappedDir(dir));
  // After the overlay: its upper dir lives on this disk. Removing the dir deletes the image.
  await disks.remove(dir);
}
