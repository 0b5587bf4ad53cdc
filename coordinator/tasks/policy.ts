import { BerthError } from "../../shared/errors.ts";
import { MAX_TASK_ARGS_BYTES, type StubConfig } from "../../shared/tasks.ts";

/**
 * When a task created at `now` expires per `task_policy.expires`: a number of
 * seconds ("180", "180s") counts from creation, an ISO timestamp is absolute;
 * empty or "0" = never.
 */
export function policyExpiresAt(config: StubConfig, now: number): number | null {
  const raw = String(config.task_policy?.expires ?? "").trim();
  if (!raw) return null;
  const secs = /^(\d+(?:\.\d+)?)s?$/.exec(raw);
  if (secs) {
    const n = Number(secs[1]);
    return n > 0 ? now + Math.round(n * 1000) : null;
  }
  const at = Date.parse(raw);
  if (Number.isNaN(at)) {
    throw new BerthError(
      "invalid_request",
      `task_policy.expires ${JSON.stringify(raw)} is neither seconds nor a timestamp`,
    );
  }
  return at;
}

/** Rejects inputs over the per-task argument limit, naming the first one. */
export function checkInputs(inputs: Uint8Array[]): void {
  if (inputs.length === 0)
    throw new BerthError("invalid_request", "no inputs: send at least one pickled argument tuple");
  inputs.forEach((b, i) => {
    if (b.byteLength > MAX_TASK_ARGS_BYTES) {
      throw new BerthError(
        "task_args_too_large",
        `input ${i} is ${b.byteLength} bytes of pickled arguments; the limit is 4 MiB (${MAX_TASK_ARGS_BYTES} bytes) per task: pass large data through a volume or an uploaded object instead`,
        { index: i, size: b.byteLength, limit: MAX_TASK_ARGS_BYTES },
      );
    }
  });
}
