// Finding a test's own processes by their command line in /proc, so that a
// fault case kills or stops this cluster's process and never another test's.

import { readdirSync, readFileSync } from "node:fs";

/** The pid of the first running process whose argv `matches`, or undefined when none does. */
export function pidWhere(matches: (argv: string[]) => boolean): number | undefined {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // gone meanwhile
    }
    if (matches(argv)) return Number(entry);
  }
  return undefined;
}

/** The value after `flag` in `argv`, or undefined when the flag is absent or first. */
export function flagValue(argv: string[], flag: string): string | undefined {
  const i = argv.indexOf(flag);
  return i > 0 ? argv[i + 1] : undefined;
}

/** The pid of the process running `coordinator --config <config>` (that cluster's, no other). */
export function coordinatorPidByConfig(config: string): number | undefined {
  return pidWhere((argv) => flagValue(argv, "--config") === config && argv.includes("coordinator"));
}
