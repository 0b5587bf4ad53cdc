// What a test's agent may leave mounted when it was stopped mid-way (killed
// while it removed a container): its dirs' mounts, and the roots of its
// user-namespaced containers under /run/berth/rootfs (agent/runtime/idmap.ts).
// Each is detached (umount -l) deepest first, so the dirs can go.

import { execFileSync } from "node:child_process";
import { readdirSync, rmdirSync } from "node:fs";
import { join } from "node:path";
import { sharedRootfsPath } from "../../agent/runtime/idmap.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";

/** Detaches every mount under `dirs` and under the shared root dir of each runtime root in `runtimeRoots`. */
export function unmountLeftovers(dirs: readonly string[], runtimeRoots: readonly string[] = []): void {
  const shared = runtimeRoots.map(sharedRootfsPath);
  for (const dir of [...dirs, ...shared])
    for (const m of mountsUnder(dir)) {
      try {
        execFileSync("umount", ["-l", m], { stdio: "ignore" });
      } catch {
        // already gone
      }
    }
  for (const dir of shared) {
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) rmdirSync(join(dir, name));
    rmdirSync(dir);
  }
}
