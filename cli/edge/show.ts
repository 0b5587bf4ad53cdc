// Tables for `berth agent ps` and `berth agent images`, and the attached
// `berth agent exec` and `logs` loops.

import type { ContainerApi, ContainerStatus, ImageSummary } from "../../api/index.ts";
import { formatBytes } from "../output.ts";
import type { EdgeIo } from "./io.ts";

/** "5s ago", "3m ago", "2h ago", "4d ago". */
export function age(ms: number, now = Date.now()): string {
  const s = Math.max(0, Math.floor((now - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86_400)}d ago`;
}

export const PS_COLUMNS = ["id", "image", "state", "cpu", "memory", "created", "exit"];

export function psRow(s: ContainerStatus, now = Date.now()): Record<string, unknown> {
  let exit: string | null = null;
  if (s.exitCode !== undefined || s.reason !== undefined) {
    exit = `${s.exitCode ?? "?"}`;
    if (s.reason && s.reason !== "exited") exit += ` (${s.reason})`;
  }
  return {
    id: s.id,
    image: s.image,
    state: s.state,
    cpu: s.cpu,
    memory: formatBytes(s.memoryBytes),
    created: age(s.createdAt, now),
    exit,
  };
}

export const IMAGE_COLUMNS = ["ref", "digest", "size", "pulled", "in_use"];

export function imageRow(i: ImageSummary): Record<string, unknown> {
  return {
    ref: i.ref,
    digest: i.digest.replace(/^sha256:/, "").slice(0, 12),
    size: formatBytes(i.sizeBytes),
    pulled: i.pulledAt,
    in_use: i.inUse ? "yes" : "no",
  };
}

/**
 * Attached exec: output to stdout/stderr as it comes, stdin forwarded when
 * asked (else closed at once), SIGINT/SIGTERM passed on to the process.
 * Returns its exit code.
 */
export async function execAttached(
  api: ContainerApi,
  id: string,
  req: { args: string[]; env?: Record<string, string>; cwd?: string; user?: string },
  io: EdgeIo,
  opts: { stdin: boolean },
): Promise<number> {
  const session = await api.exec(id, req);
  const forward = (signal: NodeJS.Signals) => () => session.kill(signal);
  const onInt = forward("SIGINT");
  const onTerm = forward("SIGTERM");
  io.signals.on("SIGINT", onInt);
  io.signals.on("SIGTERM", onTerm);
  const onData = (chunk: Buffer | string) =>
    session.writeStdin(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  const onEnd = () => session.closeStdin();
  if (opts.stdin) {
    io.stdin.on("data", onData);
    io.stdin.once("end", onEnd);
  } else {
    session.closeStdin();
  }
  try {
    for await (const chunk of session.output)
      (chunk.stream === "stderr" ? io.stderr : io.stdout).write(chunk.data);
    return await session.exit;
  } finally {
    io.signals.off("SIGINT", onInt);
    io.signals.off("SIGTERM", onTerm);
    if (opts.stdin) {
      io.stdin.off("data", onData);
      io.stdin.off("end", onEnd);
      // Let the process exit even though stdin was being read.
      (io.stdin as { pause?: () => void }).pause?.();
    }
  }
}

/** `berth agent logs`: lines to stdout/stderr by stream; SIGINT ends a follow quietly. */
export async function printLogs(
  api: ContainerApi,
  id: string,
  io: EdgeIo,
  opts: { follow: boolean; tail?: number },
): Promise<void> {
  const abort = new AbortController();
  const stop = () => abort.abort();
  io.signals.on("SIGINT", stop);
  try {
    const stream = api.streamLogs(id, { ...opts, signal: abort.signal });
    for await (const e of stream) (e.stream === "stderr" ? io.stderr : io.stdout).write(`${e.line}\n`);
  } finally {
    io.signals.off("SIGINT", stop);
  }
}
