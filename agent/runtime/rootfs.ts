import { execFile } from "node:child_process";
import { chownSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { promisify } from "node:util";

// Each container's root is an overlay: the image dirs (read-only, shared by
// every container of that image) below, the container's own upper/work dirs
// above, merged at <bundle>/rootfs. Node has no mount(2), so this runs
// mount(8)/umount(8) once each.

const execFileP = promisify(execFile);

export interface OverlayPaths {
  /** Uppermost layer first. */
  lowerDirs: string[];
  upperDir: string;
  workDir: string;
  merged: string;
}

/** `writableDir` holds the upper and work dirs: the container's own disk (disk.ts) or, without a quota, the bundle dir. */
export function overlayPathsFor(
  bundleDir: string,
  lowerDirs: string[],
  writableDir = bundleDir,
  merged = join(bundleDir, "rootfs"),
): OverlayPaths {
  return { lowerDirs, upperDir: join(writableDir, "upper"), workDir: join(writableDir, "work"), merged };
}

/** mount(2) takes its options in one page; leave room for mount(8)'s own additions. */
const MOUNT_OPTIONS_MAX = 4000;

/**
 * The overlay's mount options, and the directory to mount from: when the
 * absolute lower dirs do not fit in a page and all share one parent (the
 * image store's short layer links), they are named relative to that parent
 * and mount runs there, as containerd's overlay snapshotter does.
 */
export function overlayMountOptions(p: OverlayPaths): { options: string; cwd?: string } {
  const rest = `upperdir=${p.upperDir},workdir=${p.workDir}`;
  const options = `lowerdir=${p.lowerDirs.join(":")},${rest}`;
  if (options.length <= MOUNT_OPTIONS_MAX) return { options };
  const parent = dirname(p.lowerDirs[0] ?? "/");
  if (p.lowerDirs.some((d) => dirname(d) !== parent)) return { options };
  return { options: `lowerdir=${p.lowerDirs.map((d) => basename(d)).join(":")},${rest}`, cwd: parent };
}

export async function mountOverlay(p: OverlayPaths): Promise<void> {
  for (const d of [p.upperDir, p.workDir, p.merged]) mkdirSync(d, { recursive: true });
  // The merged root is the upper dir's root: it takes the owner of the
  // uppermost layer's root as it is seen (through an idmapped layer: the
  // container's root, not the host's, or root inside could not write in /).
  const top = p.lowerDirs[0];
  if (top) {
    const st = statSync(top);
    chownSync(p.upperDir, st.uid, st.gid);
  }
  const { options, cwd } = overlayMountOptions(p);
  try {
    await execFileP("mount", ["-t", "overlay", "overlay", "-o", options, p.merged], cwd ? { cwd } : {});
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`overlay mount at ${p.merged} failed: ${(err.stderr || err.message).trim()}`);
  }
}

/** Mount points at or below `dir`, deepest first, from /proc/self/mountinfo. */
export function mountsUnder(dir: string, mountinfo = "/proc/self/mountinfo"): string[] {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  const out: string[] = [];
  for (const line of readFileSync(mountinfo, "utf8").split("\n")) {
    const raw = line.split(" ")[4];
    if (!raw) continue;
    // mountinfo escapes space, tab, newline and backslash as octal.
    const point = raw.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
    if (point === dir || point.startsWith(prefix)) out.push(point);
  }
  return out.sort((a, b) => b.length - a.length);
}

/** Unmounts everything at or below `merged`; a no-op when nothing is mounted. */
export async function unmountOverlay(merged: string): Promise<void> {
  for (const point of mountsUnder(merged)) {
    try {
      await execFileP("umount", [point]);
    } catch {
      // Still busy (a process holds a file open): detach it now; the kernel
      // frees it when the last user goes.
      try {
        await execFileP("umount", ["-l", point]);
      } catch (e) {
        const err = e as { stderr?: string; message: string };
        throw new Error(`unmount of ${point} failed: ${(err.stderr || err.message).trim()}`);
      }
    }
  }
}
