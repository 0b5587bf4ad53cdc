import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { BerthError } from "../../shared/errors.ts";
import { readRuncErrors } from "./runc.ts";
import type { ContainerPaths } from "./state.ts";

// The error run() throws when runc never got the process going: runc's own
// message (from its --log file) plus whatever the container or runc printed
// on stderr that the message does not already say.

export function startFailure(id: string, paths: ContainerPaths, status: number | undefined): BerthError {
  const runcErrors = readRuncErrors(paths.runcLog);
  let stderr = "";
  try {
    stderr = readLogTail(paths.stderr);
  } catch {
    // no stderr
  }
  // runc also prints its fatal error on stderr; keep only what adds to it.
  const extra = stderr
    .split("\n")
    .filter((l) => l.trim() && !runcErrors.some((r) => l.includes(r) || r.includes(l.trim())))
    .join("\n");
  const why = runcErrors.at(-1) ?? `runc exited with status ${status ?? "unknown"}`;
  return new BerthError(
    "failed_precondition",
    `container ${id} failed to start: ${why}${extra ? `\nstderr:\n${extra}` : ""}`,
    { containerId: id, runcErrors, stderr },
  );
}

function readLogTail(path: string, bytes = 8192): string {
  const fd = openSync(path, "r");
  try {
    const buf = Buffer.alloc(bytes);
    const { size } = fstatSync(fd);
    const n = readSync(fd, buf, 0, bytes, Math.max(0, size - bytes));
    return buf.subarray(0, n).toString("utf8");
  } finally {
    closeSync(fd);
  }
}
