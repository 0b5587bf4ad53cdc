// A sandbox command in one round trip (docs/sandboxes.md, "One round trip"):
// `POST /sandboxes/{id}/processes/run` answers a stream of frames, each a
// kind byte, a 4-byte big-endian length and the payload:
//   "P" JSON process (pid, args, ...)   first, once the process started
//   "O" raw bytes                        stdout, in order
//   "E" raw bytes                        stderr, in order
//   "X" JSON {exit_code, status}         last, after all of its output
// A stream that ends without "X" was cut off: the process runs on, and its
// output and exit are read with the ordinary routes from the offsets reached.

import type { ProcessInfo, ProcessRunEvent } from "../../api/index.ts";
import { processJson } from "./routes-common.ts";

export const RunFrame = {
  started: 0x50, // "P"
  stdout: 0x4f, // "O"
  stderr: 0x45, // "E"
  exit: 0x58, // "X"
} as const;

export const RUN_CONTENT_TYPE = "application/vnd.berth.process-run";
/** Largest payload of one frame; longer output is cut into several. */
export const MAX_RUN_FRAME = 1 << 20;

export function encodeRunFrame(kind: number, payload: Uint8Array): Buffer {
  const header = Buffer.alloc(5);
  header[0] = kind;
  header.writeUInt32BE(payload.byteLength, 1);
  return Buffer.concat([header, payload]);
}

const json = (kind: number, obj: unknown) => encodeRunFrame(kind, Buffer.from(JSON.stringify(obj)));

/** The frames of a run whose `started` event came already; the rest from `events`. */
export async function* runFrames(
  started: ProcessInfo,
  events: AsyncIterator<ProcessRunEvent>,
): AsyncGenerator<Buffer> {
  yield json(RunFrame.started, processJson(started));
  try {
    for (;;) {
      const next = await events.next();
      if (next.done) return;
      const e = next.value;
      if (e.type === "output") {
        const kind = e.stream === "stderr" ? RunFrame.stderr : RunFrame.stdout;
        for (let at = 0; at < e.data.byteLength; at += MAX_RUN_FRAME) {
          yield encodeRunFrame(kind, e.data.subarray(at, at + MAX_RUN_FRAME));
        }
      } else if (e.type === "ended") {
        yield json(RunFrame.exit, { exit_code: e.process.exitCode, status: e.process.status });
        return;
      }
    }
  } finally {
    // The client went away or the run ended: the agent's stream is let go either way.
    await events.return?.();
  }
}
