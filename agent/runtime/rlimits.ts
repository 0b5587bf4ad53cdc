import { readFileSync } from "node:fs";
import type { OciRlimit } from "./oci-types.ts";

// runc applies rlimits with setrlimit inside the container. Raising a hard
// limit above the caller's needs CAP_SYS_RESOURCE, which hosts (and this
// project's CI VM) may not grant, so every limit berth asks for is clamped to
// the hard limit the agent itself runs under (runc inherits it).

/** Hard limits by /proc/<pid>/limits row name; null means unlimited. */
export type HardLimits = Map<string, number | null>;

const ROW_NAMES = {
  RLIMIT_NOFILE: "Max open files",
  RLIMIT_NPROC: "Max processes",
} as const;

export function parseProcLimits(text: string): HardLimits {
  const out: HardLimits = new Map();
  for (const line of text.split("\n").slice(1)) {
    // Columns are aligned with spaces; the name itself contains single spaces.
    const cols = line.trim().split(/\s{2,}/);
    if (cols.length < 3) continue;
    const [name, , hard] = cols as [string, string, string];
    out.set(name, hard === "unlimited" ? null : Number(hard));
  }
  return out;
}

export function readHostHardLimits(path = "/proc/self/limits"): HardLimits {
  return parseProcLimits(readFileSync(path, "utf8"));
}

/** What berth would like inside a container before clamping. */
export const DESIRED_RLIMITS: Record<keyof typeof ROW_NAMES, number> = {
  RLIMIT_NOFILE: 1_048_576,
  // NPROC counts every process of the uid host-wide (there is no user
  // namespace), so a low value would break containers on busy hosts; the pids
  // cgroup is the real per-container limit. Ask for a lot and let the clamp decide.
  RLIMIT_NPROC: 4_194_304,
};

/** soft = hard = min(desired, host hard). */
export function clampedRlimits(hard: HardLimits, desired = DESIRED_RLIMITS): OciRlimit[] {
  const out: OciRlimit[] = [];
  for (const [type, want] of Object.entries(desired) as [keyof typeof ROW_NAMES, number][]) {
    const host = hard.get(ROW_NAMES[type]);
    const value = host === null || host === undefined ? want : Math.min(want, host);
    out.push({ type, hard: value, soft: value });
  }
  return out;
}
