// Volume names and where a volume lives under a volume root (docs/volumes.md).
// The coordinator (REST routes, stub configs) and the agent (mounts) judge a
// name by the same rule, and both place a volume at
// <root>/<workspace id>/<name>, so the workspace is part of every path.

import { join } from "node:path";
import { checkStubBuckets, isBucketEntry } from "./buckets.ts";
import { invalid } from "./errors.ts";

/** Letters, digits, `_ . -`, starting with a letter or digit, at most 63 characters. */
export const VOLUME_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
/** Workspace ids are generated (letters, digits, `_ -`); anything else never names a directory. */
const WORKSPACE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

/** Where every container sees each of its volumes, besides its mount_path. */
export const VOLUMES_DIR = "/volumes";

/** The name, or invalid_request naming the rule it breaks. */
export function checkVolumeName(name: unknown, field = "name"): string {
  if (typeof name !== "string" || !VOLUME_NAME_RE.test(name)) {
    throw invalid(
      `volume ${field} ${JSON.stringify(name)} is not valid: use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit`,
      { field },
    );
  }
  return name;
}

export function checkWorkspaceId(id: unknown): string {
  if (typeof id !== "string" || !WORKSPACE_ID_RE.test(id)) {
    throw invalid(`workspace id ${JSON.stringify(id)} is not valid for a volume path`, {
      field: "workspaceId",
    });
  }
  return id;
}

/** A volume's directory under `root` (which need not exist yet). */
export function volumeDir(root: string, workspaceId: string, name: string): string {
  return join(root, checkWorkspaceId(workspaceId), checkVolumeName(name));
}

/** One volume of a stub's config (`volumes` entries as the SDK sends them). */
export interface StubVolume {
  name: string;
  mount_path: string;
}

/**
 * A mount_path: relative (to the container's working directory) or
 * absolute, no `..` segment, not the root and not under /volumes (where
 * every volume is mounted by name anyway).
 */
export function checkMountPath(p: unknown, field = "mount_path"): string {
  if (typeof p !== "string" || p.trim() === "" || p.length > 1024 || p.includes("\0")) {
    throw invalid(`volume ${field} must be a non-empty path, got ${JSON.stringify(p)}`, { field });
  }
  const segments = p.split("/").filter((s) => s !== "" && s !== ".");
  if (segments.includes(".."))
    throw invalid(`volume ${field} ${JSON.stringify(p)} may not contain '..'`, { field });
  if (segments.length === 0)
    throw invalid(`volume ${field} ${JSON.stringify(p)} names no directory`, { field });
  if (
    p.startsWith("/") &&
    (segments[0] === VOLUMES_DIR.slice(1) || segments[0] === "proc" || segments[0] === "sys")
  ) {
    throw invalid(`volume ${field} ${JSON.stringify(p)} may not lie under /${segments[0]}`, { field });
  }
  return p;
}

/**
 * The Volumes of a stub config's `volumes`, checked: a list of {name,
 * mount_path}, names unique. CloudBucket entries (those with a `config`,
 * shared/buckets.ts) are checked too but not returned.
 */
export function checkStubVolumes(v: unknown): StubVolume[] {
  if (v === null || v === undefined) return [];
  if (!Array.isArray(v)) throw invalid("volumes must be a list of {name, mount_path}", { field: "volumes" });
  checkStubBuckets(v);
  const seen = new Set<string>();
  const out: StubVolume[] = [];
  v.forEach((entry, i) => {
    if (isBucketEntry(entry)) return;
    if (typeof entry !== "object" || entry === null) {
      throw invalid(`volumes[${i}] must be {name, mount_path}`, { field: `volumes[${i}]` });
    }
    const e = entry as Record<string, unknown>;
    const name = checkVolumeName(e.name, `volumes[${i}].name`);
    if (seen.has(name)) throw invalid(`volume ${name} is listed twice`, { field: `volumes[${i}].name` });
    seen.add(name);
    out.push({ name, mount_path: checkMountPath(e.mount_path, `volumes[${i}].mount_path`) });
  });
  return out;
}

/** A stub's volumes as the agent's request carries them (api VolumeMount). */
export function stubVolumeMounts(
  workspaceId: string,
  volumes: unknown,
): { workspaceId: string; name: string; mountPath: string }[] {
  return checkStubVolumes(volumes).map((v) => ({ workspaceId, name: v.name, mountPath: v.mount_path }));
}
