// Loop devices a test left: each container disk is a loop-mounted image
// (agent/runtime/disk.ts), and a loop device outlives its test if its mount
// was never undone.

import { execFileSync } from "node:child_process";

/** Loop devices whose backing file lies under `dir` (losetup -a: "/dev/loopN: [...]: (/path)"). */
export const loopsUnder = (dir: string): string[] =>
  execFileSync("losetup", ["-a"], { encoding: "utf8" })
    .split("\n")
    .filter((l) => l.includes(`(${dir.replace(/\/+$/, "")}/`));
