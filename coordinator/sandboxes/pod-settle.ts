// A pod create answers once its entrypoint has stayed up a moment
// (podSettleMs): one that exits at once fails the create with its exit code
// and last output, so the caller (the SDK prints it, result.error holds it)
// learns why instead of holding a pod that was never up. A program that does
// not exist fails earlier, in runContainer, with the runtime's message.

import type { ContainerApi } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import type { SandboxRecord } from "./store.ts";

/** Resolves once the container has run for settleMs; throws failed_precondition when it ended sooner. */
export async function podStayedUp(
  api: Pick<ContainerApi, "getContainer" | "streamLogs">,
  id: string,
  settleMs: number,
  record: () => Promise<SandboxRecord | undefined>,
): Promise<void> {
  if (settleMs <= 0) return;
  const deadline = Date.now() + settleMs;
  for (;;) {
    // Gone from the agent: the exit event's upkeep removed it already.
    const st = await api.getContainer(id).catch(() => undefined);
    if (st === undefined || st.state === "stopped") {
      const output = st ? await logTail(api, id) : "";
      const how = st
        ? `exited at once (code ${st.exitCode ?? "unknown"})`
        : `ended at once (${(await record())?.terminatedReason ?? "its container is gone"})`;
      throw new BerthError(
        "failed_precondition",
        `the pod's entrypoint ${how}${output ? `; its last output:\n${output}` : " without output"}`,
        { container_id: id, ...(st?.exitCode !== undefined ? { exit_code: st.exitCode } : {}) },
      );
    }
    const left = deadline - Date.now();
    if (left <= 0) return;
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
