// A pod create answers once its entrypoint has stayed up a moment
// (podSettleMs), or once it has finished: an entrypoint that exits 0 is a pod
// that ran (a batch job), and the create answers it with its exit code. One
// that exits non-zero at once fails the create with its exit code and last
// output, so the caller (the SDK prints it, result.error holds it) learns why
// instead of holding a pod that was never up. A program that does not exist
// fails earlier, in runContainer, with the runtime's message.

import type { ContainerApi } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import type { SandboxRecord } from "./store.ts";

/** How the pod's first moments went: still up after settleMs, or finished with exit code 0. */
export type PodSettled = "up" | "finished";

/** Resolves once the container has run for settleMs or exited 0; throws failed_precondition when it failed sooner. */
export async function podStayedUp(
  api: Pick<ContainerApi, "getContainer" | "streamLogs">,
  id: string,
  settleMs: number,
  record: () => Promise<SandboxRecord | undefined>,
): Promise<PodSettled> {
  if (settleMs <= 0) return "up";
  const deadline = Date.now() + settleMs;
  for (;;) {
    // Gone from the agent: the exit event's upkeep removed it already.
    const st = await api.getContainer(id).catch(() => undefined);
    if (st?.state === "stopped" && st.exitCode === 0) return "finished";
    if (st === undefined || st.state === "stopped") {
      const rec = st ? undefined : await record();
      if (rec?.exitCode === 0) return "finished";
      const output = st ? await logTail(api, id) : "";
      const how = st
        ? `exited at once (code ${st.exitCode ?? "unknown"})`
        : `ended at once (${rec?.terminatedReason ?? "its container is gone"})`;
      const exitCode = st?.exitCode ?? rec?.exitCode ?? undefined;
      throw new BerthError(
        "failed_precondition",
        `the pod's entrypoint ${how}${output ? `; its last output:\n${output}` : " without output"}`,
        { container_id: id, ...(exitCode !== undefined && exitCode !== null ? { exit_code: exitCode } : {}) },
      );
    }
    const left = deadline - Date.now();
    if (left <= 0) return "up";
    await new Promise((r) => setTimeout(r, Math.min(100, left)));
  }
}

/** The last lines a stopped container wrote (stdout and stderr): at most 20 lines and 2000 characters. */
async function logTail(api: Pick<ContainerApi, "streamLogs">, id: string): Promise<string> {
  const lines: string[] = [];
  try {
    for await (const e of api.streamLogs(id, { tail: 20 })) lines.push(e.line);
  } catch {
    // Best effort: the container may be removed meanwhile; the exit code still says what happened.
  }
  return lines.join("\n").trimEnd().slice(-2000);
}
