import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { unmountOverlay } from "../../agent/runtime/rootfs.ts";
import type { Cleanup } from "./cleanup.ts";

/** Unmounts everything below `dir` (lazily if busy), then removes it. */
export async function removeTree(dir: string): Promise<void> {
  await unmountOverlay(dir);
  if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
}

/** A fresh temp dir that `cleanup` unmounts and removes. */
export function benchTempDir(cleanup: Cleanup, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanup.add(`remove ${dir}`, () => removeTree(dir));
  return dir;
}
