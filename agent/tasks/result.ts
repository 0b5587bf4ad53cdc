// The body of `POST /v1/tasks/{id}/result`, checked: it comes from user code's
// container, so nothing in it is trusted.

import { MAX_TASK_RESULT_BYTES, type TaskError } from "../../shared/tasks.ts";
import { BridgeError } from "./bridge-error.ts";

export type ResultBody = (
  | { status: "COMPLETE"; result: string; resultJson?: string; tooLarge?: TaskError }
  | { status: "FAILED"; error: TaskError; retry: boolean }
) & {
  /** When the runner started the task (ms since epoch), if it says. */
  startedAt?: number;
};

/** Above this the JSON copy is dropped, so the event stays under NATS's payload limit. */
const MAX_RESULT_JSON_CHARS = 1024 * 1024;
const B64_RE = /^[A-Za-z0-9+/]*={0,2}$/;

const bad = (message: string) => new BridgeError(400, "invalid_request", message);
const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** Decoded size of base64 text. */
export const base64Bytes = (b64: string) =>
  Math.floor((b64.length * 3) / 4) - (b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0);

function taskError(v: unknown): TaskError {
  if (!isObject(v) || typeof v.type !== "string" || typeof v.message !== "string") {
    throw bad("error must be { type, message, traceback, pickled? }");
  }
  const e: TaskError = {
    type: v.type.slice(0, 1000),
    message: v.message.slice(0, 64 * 1024),
    traceback: typeof v.traceback === "string" ? v.traceback.slice(-256 * 1024) : "",
  };
  // A pickled exception over the result limit is dropped: the type and message still say what happened.
  if (
    typeof v.pickled === "string" &&
    B64_RE.test(v.pickled) &&
    base64Bytes(v.pickled) <= MAX_TASK_RESULT_BYTES
  ) {
    e.pickled = v.pickled;
  }
  return e;
}

export function checkResult(body: unknown): ResultBody {
  if (!isObject(body)) throw bad("the result body must be a JSON object");
  const r = checkOutcome(body);
  const at = body.started_at;
  if (at !== undefined && at !== null) {
    if (typeof at !== "number" || !Number.isFinite(at) || at < 0)
      throw bad("started_at must be a time in ms since the epoch");
    r.startedAt = at;
  }
  return r;
}

function checkOutcome(body: Record<string, unknown>): ResultBody {
  if (body.status === "COMPLETE") {
    if (typeof body.result !== "string" || !B64_RE.test(body.result)) {
      throw bad("result must be base64 text (the pickled return value)");
    }
    const size = base64Bytes(body.result);
    if (size > MAX_TASK_RESULT_BYTES) {
      return {
        status: "COMPLETE",
        result: "",
        tooLarge: {
          type: "ResultTooLarge",
          message: `the pickled result is ${size} bytes, over the limit of ${MAX_TASK_RESULT_BYTES} bytes (${MAX_TASK_RESULT_BYTES / 1024 / 1024} MiB)`,
          traceback: "",
        },
      };
    }
    const out: ResultBody = { status: "COMPLETE", result: body.result };
    const json = body.result_json;
    if (json !== undefined && json !== null && typeof json !== "string")
      throw bad("result_json must be a string");
    if (typeof json === "string" && json.length <= MAX_RESULT_JSON_CHARS) out.resultJson = json;
    return out;
  }
  if (body.status === "FAILED") {
    if (body.retry !== undefined && typeof body.retry !== "boolean") throw bad("retry must be a boolean");
    return { status: "FAILED", error: taskError(body.error), retry: body.retry === true };
  }
  throw bad(`status must be "COMPLETE" or "FAILED", got ${JSON.stringify(body.status)}`);
}
