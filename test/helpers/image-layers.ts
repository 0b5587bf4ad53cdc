// Reading an image the store unpacked as layers (ImageInfo.layers, overlay
// lower dirs, uppermost first) the way a container sees it.

import { execFileSync } from "node:child_process";
import { lstatSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * The path of `rel` in the uppermost layer that has it, or a path that does
 * not exist when no layer has it or the uppermost mention is a whiteout.
 * Enough for a test to read a file; opaque directories are not followed.
 */
export function imageFile(info: { layers: string[] }, rel: string): string {
  for (const layer of info.layers) {
    const p = join(layer, rel);
    try {
      const st = lstatSync(p);
      if (st.isCharacterDevice() && st.rdev === 0) break;
      return p;
    } catch {
      // not in this layer: look below
    }
  }
  return join(info.layers.at(-1) ?? "/nonexistent", ".berth-test-absent", rel);
}

/** The image mounted read-only (an overlay of its layers) on a temp dir, unmounted after `t`. */
export function mountImage(t: { after: (fn: () => void) => void }, info: { layers: string[] }): string {
  const dir = mkdtempSync(join(tmpdir(), "berth-image-view-"));
  // A read-only overlay needs two lower dirs: an empty one at the bottom.
  const empty = join(dir, "empty");
  const merged = join(dir, "merged");
  mkdirSync(empty);
  mkdirSync(merged);
  execFileSync("mount", [
    "-t",
    "overlay",
    "overlay",
    "-o",
    `ro,lowerdir=${[...info.layers, empty].join(":")}`,
    merged,
  ]);
  t.after(() => {
    execFileSync("umount", [merged]);
    rmSync(dir, { recursive: true, force: true });
  });
  return merged;
}
