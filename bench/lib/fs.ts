import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Cleanup } from "./cleanup.ts";

const execFileP = promisify(execFile);

/** Mount points at or below `dir`, deepest first. */
export function mountsUnder(dir: string): string[] {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  const out: string[] = [];
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const raw = line.split(" ")[4];
    if (!raw) continue;
    const point = raw.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
    if (point === dir || point.startsWith(prefix)) out.push(point);
  }
  return out.sort((a, b) => b.length - a.length);
}

/** Unmounts everything below `dir` (lazily if busy), then removes it. */
export async function removeTree(dir: string): Promise<void> {
  for (const point of mountsUnder(dir)) {
    try {
      await execFileP("umount", [point]);
    } catch {
      await execFileP("umount", ["-l", point]);
    }
  }
  if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
}

/** A fresh temp dir that `cleanup` unmounts and removes. */
export function benchTempDir(cleanup: Cleanup, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanup.add(`remove ${dir}`, () => removeTree(dir));
  return dir;
}
