import { execFile } from "node:child_process";
import { chownSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { unmountOverlay } from "./rootfs.ts";

// A code slot: a directory of the bundle, bind-mounted onto itself and made
// a shared mount of its own peer group, which the container gets at a path
// of its choice with `rslave` propagation. A mount the agent makes on the
// slot later, while the container runs, appears at that path inside it: this
// is how a pre-warmed runner (docs/runtime.md, "Pre-warmed runners") gets
// its stub's code after it started. Nothing mounted on the slot inside the
// container travels back out (slave, not shared).

const execFileP = promisify(execFile);

export const slotPath = (bundleDir: string) => join(bundleDir, "code-slot");

async function mount(args: string[]): Promise<void> {
  try {
    await execFileP("mount", args);
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`mount ${args.join(" ")} failed: ${(err.stderr || err.message).trim()}`);
  }
}

/** Makes the bundle's slot (private first, so it joins no peer group of its parent, then shared). */
export async function prepareSlot(bundleDir: string): Promise<string> {
  const slot = slotPath(bundleDir);
  mkdirSync(slot, { recursive: true });
  await mount(["--bind", slot, slot]);
  await mount(["--make-private", slot]);
  await mount(["--make-shared", slot]);
  return slot;
}

/**
 * Mounts `lowerDir` on the slot as an overlay whose upper and work dirs are
 * in `writableDir` (the container's disk): the container may write there,
 * into its own quota, while the tree below stays shared and unchanged.
 */
export async function mountOnSlot(bundleDir: string, lowerDir: string, writableDir: string): Promise<void> {
  const upper = join(writableDir, "code-upper");
  const work = join(writableDir, "code-work");
  for (const d of [upper, work]) mkdirSync(d, { recursive: true });
  // The merged dir is the upper's root: it takes the owner of the tree as it is seen (through
  // an idmapped lower dir, root inside; rootfs.ts mountOverlay does the same).
  const st = statSync(lowerDir);
  chownSync(upper, st.uid, st.gid);
  await mount([
    "-t",
    "overlay",
    "overlay",
    "-o",
    `lowerdir=${lowerDir},upperdir=${upper},workdir=${work}`,
    slotPath(bundleDir),
  ]);
}

/** Unmounts what is on the slot and the slot itself; a no-op when there is none. */
export function removeSlot(bundleDir: string): Promise<void> {
  return unmountOverlay(slotPath(bundleDir));
}
