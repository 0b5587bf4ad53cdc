// Workspace volumes on an agent (docs/volumes.md): a volume is the directory
// <volumeRoot>/<workspace id>/<name>, created on first use, bind-mounted
// read-write at /volumes/<name> and at its mount_path. The volume root is a
// path the operator makes the same on every agent (local disk on one host,
// an NFS or other shared mount on many); the agent only ever mounts
// directories under it, so a request cannot reach another host path.

import { mkdirSync, statSync } from "node:fs";
import { isAbsolute, join, posix, relative } from "node:path";
import { BerthError, invalid } from "../../shared/errors.ts";
import {
  VOLUMES_DIR,
  checkMountPath,
  checkVolumeName,
  checkWorkspaceId,
  volumeDir,
} from "../../shared/volumes.ts";
import type { VolumeMount } from "../../api/index.ts";
import type { BindMount } from "../runtime/index.ts";

/** The request's volumes, type-checked (names, workspace ids, mount paths); names unique. */
export function checkVolumeMounts(v: unknown): VolumeMount[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v))
    throw invalid("volumes must be a list of { workspaceId, name, mountPath }", { field: "volumes" });
  const seen = new Set<string>();
  return v.map((m, i) => {
    if (typeof m !== "object" || m === null) {
      throw invalid(`volumes[${i}] must be { workspaceId, name, mountPath }`, { field: `volumes[${i}]` });
    }
    const r = m as Record<string, unknown>;
    const name = checkVolumeName(r.name, `volumes[${i}].name`);
    if (seen.has(name)) throw invalid(`volume ${name} is listed twice`, { field: `volumes[${i}].name` });
    seen.add(name);
    return {
      workspaceId: checkWorkspaceId(r.workspaceId),
      name,
      mountPath: checkMountPath(r.mountPath, `volumes[${i}].mountPath`),
    };
  });
}

/** Where a volume appears in the container: its mount_path, resolved against the working directory. */
export function volumeDestination(mountPath: string, cwd: string): string {
  const p = posix.normalize(isAbsolute(mountPath) ? mountPath : posix.join(cwd, mountPath));
  return p.length > 1 ? p.replace(/\/+$/, "") : p;
}

/**
 * A destination under a read-only bind mount (the code tree, mounted at the
 * working directory of runner containers) cannot be created by runc inside
 * the container, so its directory is made on the host side of that mount.
 */
export interface ReadOnlyParent {
  destination: string;
  source: string;
}

/**
 * The bind mounts of the request's volumes: the volume directories (made
 * when missing), each at /volumes/<name> and at its destination.
 * Fails with invalid_request when the volume root is not configured or a
 * mountpoint cannot be made, naming the volume.
 */
export function volumeBindMounts(
  volumes: readonly VolumeMount[],
  root: string | undefined,
  cwd: string,
  readOnlyParents: readonly ReadOnlyParent[] = [],
): BindMount[] {
  if (volumes.length === 0) return [];
  if (!root) {
    throw new BerthError(
      "failed_precondition",
      `this agent has no volume root configured, so volume ${volumes[0]!.name} cannot be mounted (agent option volumeRoot / --volume-root)`,
    );
  }
  const out: BindMount[] = [];
  for (const v of volumes) {
    const dir = volumeDir(root, v.workspaceId, v.name);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    const dest = volumeDestination(v.mountPath, cwd);
    for (const p of readOnlyParents) {
      const rel = relative(p.destination, dest);
      if (rel === "" || rel.startsWith("..") || isAbsolute(rel)) continue;
      const hostDir = join(p.source, rel);
      try {
        mkdirSync(hostDir, { recursive: true, mode: 0o755 });
      } catch (e) {
        throw invalid(
          `volume ${v.name}: cannot make its mountpoint ${dest} (${(e as NodeJS.ErrnoException).code}); a file of that name exists in the code?`,
          { field: "volumes" },
        );
      }
      if (!statSync(hostDir).isDirectory())
        throw invalid(`volume ${v.name}: ${dest} is not a directory in the code`);
    }
    // Shared by the workspace's containers: each sees it through its own id mapping (runtime/idmap.ts).
    out.push({ source: dir, destination: `${VOLUMES_DIR}/${v.name}`, readonly: false, idmapped: true });
    if (dest !== `${VOLUMES_DIR}/${v.name}`)
      out.push({ source: dir, destination: dest, readonly: false, idmapped: true });
  }
  return out;
}
