import { removeCgroupDirs } from "../../agent/runtime/cgroups.ts";
import { detectCgroups } from "../../agent/runtime/index.ts";

/**
 * Removes a cgroup a tool under test created and left behind (containerd's
 * per-namespace parent, podman's --cgroup-parent, berth's cgroupParent) from
 * every hierarchy; throws naming the dirs that still hold processes.
 */
export function removeCgroup(cgroupsPath: string): void {
  const busy = removeCgroupDirs(detectCgroups(), cgroupsPath);
  if (busy.length > 0) throw new Error(`cgroup dirs still in use: ${busy.join(", ")}`);
}
