import { fmtMs, percentile } from "../lib/stats.ts";
import type { CreateSample } from "./berth.ts";

/** The steps of create → first output in the order they happen, and who timed each. */
const STEPS: { mark: string; what: string }[] = [
  { mark: "stub_registered", what: "SDK: POST /stubs answered (get-or-create of the stub)" },
  { mark: "row_inserted", what: "coordinator: placed, sandbox row inserted (its created_at)" },
  {
    mark: "runtime_run_called",
    what: "agent: runtime.run called (gRPC RunContainer, capacity, image, netns, hosts file)",
  },
  { mark: "init_running", what: "agent: container init running (overlay, config.json, runc create/start)" },
  { mark: "create_answered", what: "SDK: POST /sandboxes answered (agent answer, markRunning, reply)" },
  { mark: "process_started", what: "coordinator: exec session open (gRPC RunProcess, exec spawned)" },
  { mark: "exec_answered", what: "SDK: exec returned (POST /processes/run: its first frame, the pid)" },
  { mark: "first_output", what: "SDK: `ready` read from the output stream (runc exec, python3 start)" },
];

export interface BreakdownStep {
  mark: string;
  what: string;
  /** p50 over samples of ms from the create call. */
  p50AtMs: number;
  /** p50 over samples of the time since the step before (not the difference of the p50s). */
  p50StepMs: number;
}

/**
 * Where create → first output goes: per step, the p50 time since the create
 * call and the p50 of the step's own length. The coordinator's and agent's
 * marks come from their own clocks (the same host, so the same wall clock).
 */
export function createBreakdown(samples: CreateSample[]): { steps: BreakdownStep[]; text: string } {
  const p50 = (xs: number[]) =>
    percentile(
      [...xs].sort((a, b) => a - b),
      50,
    );
  const steps: BreakdownStep[] = [];
  let prev: string | undefined;
  for (const s of STEPS) {
    const at = samples.map((x) => x.marks[s.mark]).filter((v): v is number => typeof v === "number");
    if (at.length === 0) continue;
    const deltas = samples
      .map((x) => {
        const a = x.marks[s.mark];
        const b = prev === undefined ? 0 : x.marks[prev];
        return typeof a === "number" && typeof b === "number" ? a - b : undefined;
      })
      .filter((v): v is number => v !== undefined);
    steps.push({ mark: s.mark, what: s.what, p50AtMs: p50(at), p50StepMs: p50(deltas) });
    prev = s.mark;
  }
  const text = steps
    .map((s) => `  +${fmtMs(s.p50StepMs).padStart(6)}  @${fmtMs(s.p50AtMs).padStart(6)}  ${s.what}`)
    .join("\n");
  return { steps, text };
}
