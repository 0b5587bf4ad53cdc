// A debug trace of each task message's life on this agent: which pull
// fetched it, which hand-out took it, releases, holds, acks and naks, with
// wall-clock timestamps. Off unless BERTH_TASK_TRACE names a file; lines are
// buffered and appended a few times a second, so a traced `.map()` of
// 10,000 items keeps its pace.

import { appendFileSync } from "node:fs";

const path = process.env.BERTH_TASK_TRACE || undefined;
let lines: string[] = [];
let timer: NodeJS.Timeout | undefined;
let nextId = 1;

/** Whether tracing is on (callers skip building fields when it is not). */
export const tracing = path !== undefined;

/** A number naming one pull or hand-out in the trace. */
export const traceId = (): number => nextId++;

/** Appends one event: `<unix ms> <event> <json fields>`. */
export function trace(event: string, fields: Record<string, unknown>): void {
  if (!path) return;
  lines.push(
    `${(performance.timeOrigin + performance.now()).toFixed(3)} ${event} ${JSON.stringify(fields)}\n`,
  );
  if (lines.length >= 2000) flush();
  else if (!timer) {
    timer = setTimeout(flush, 200);
    timer.unref?.();
  }
}

function flush(): void {
  clearTimeout(timer);
  timer = undefined;
  if (!path || lines.length === 0) return;
  const out = lines.join("");
  lines = [];
  try {
    appendFileSync(path, out);
  } catch {
    // A debug aid: a trace that cannot be written is dropped, not fatal.
  }
}

if (path) process.on("exit", flush);
