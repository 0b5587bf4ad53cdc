// The agent's end of ProcessChannel (proto/agent.proto; the client's end is
// api/grpc/process-channel.ts): runs started by number on one stream, each
// streaming what SandboxProcessApi.runProcess yields. A run sends output
// while it has credit (RUN_WINDOW bytes, topped up by the client as it
// reads) and waits for more otherwise, so one slow reader holds back its
// own run only. The stream's end or cancel stops every run on it (their
// processes run on, as a cancelled RunProcess leaves them).

import type * as grpc from "@grpc/grpc-js";
import type { ProcessRunEvent, SandboxProcessApi } from "../../api/index.ts";
import {
  execRequestFromProto,
  RUN_WINDOW,
  runEventToProto,
  toGrpcError,
  type WireChannelEvent,
  type WireChannelRequest,
  type WireExecRequest,
} from "../../api/grpc/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import type { Authorize } from "./container-handlers.ts";

interface Run {
  abort: AbortController;
  credit: number;
  /** Wakes the run waiting for credit. */
  wake?: () => void;
}

function channelError(e: unknown): WireChannelEvent["error"] {
  const err =
    e instanceof BerthError
      ? e
      : new BerthError("internal", `internal error in the agent: ${describeError(e)}`);
  return {
    code: err.code,
    message: err.message,
    details: err.details ? Buffer.from(JSON.stringify(err.details)) : Buffer.alloc(0),
  };
}

const outputBytes = (e: ProcessRunEvent) => (e.type === "output" ? e.data.byteLength : 0);

/**
 * The channels open on one server. A stopping agent drains them: new runs
 * are refused as `unavailable`, and each channel's stream ends once its runs
 * have, so the server's graceful shutdown is not held up by streams that
 * would otherwise stay open for good.
 */
export class ProcessChannels {
  private readonly open = new Set<() => void>();
  draining = false;

  add(drain: () => void): () => void {
    this.open.add(drain);
    return () => this.open.delete(drain);
  }

  drain(): void {
    this.draining = true;
    for (const d of [...this.open]) d();
  }
}

export function processChannel(
  impl: SandboxProcessApi,
  authorize: Authorize,
  channels: ProcessChannels,
): grpc.handleBidiStreamingCall<WireChannelRequest, WireChannelEvent> {
  return (call) => {
    try {
      authorize(call);
    } catch (e) {
      call.on("error", () => {});
      call.emit("error", toGrpcError(e));
      return;
    }
    const runs = new Map<number, Run>();
    let open = true;
    // The client half-closed (its client was closed): its runs in flight finish, then the stream ends.
    let clientDone = false;
    const endIfDrained = () => {
      if (open && (channels.draining || clientDone) && runs.size === 0) {
        open = false;
        forget();
        call.end();
      }
    };
    const forget = channels.add(endIfDrained);
    // A full stream waits for drain, or for the run's stop (a cancelled stream never drains).
    const send = (ev: WireChannelEvent, stop?: AbortSignal): Promise<void> => {
      if (!open) return Promise.resolve();
      if (call.write(ev) || stop?.aborted) return Promise.resolve();
      return new Promise((resolve) => {
        const done = () => {
          call.off("drain", done);
          stop?.removeEventListener("abort", done);
          resolve();
        };
        call.once("drain", done);
        stop?.addEventListener("abort", done, { once: true });
      });
    };

    const start = async (
      run: number,
      r: Run,
      wire: { containerId: string; request: WireExecRequest | null },
    ) => {
      let sawEnd = false;
      try {
        if (!impl.runProcess)
          throw new BerthError("not_implemented", "this agent cannot run a process in one call");
        const events = impl.runProcess(wire.containerId, execRequestFromProto(wire.request), {
          signal: r.abort.signal,
        });
        for await (const e of events) {
          if (r.abort.signal.aborted) break;
          const bytes = outputBytes(e);
          while (bytes > 0 && r.credit <= 0 && !r.abort.signal.aborted) {
            await new Promise<void>((resolve) => {
              r.wake = resolve;
            });
          }
          if (r.abort.signal.aborted) break;
          r.credit -= bytes;
          await send({ run, event: runEventToProto(e) }, r.abort.signal);
          if (e.type === "ended") {
            sawEnd = true;
            break;
          }
        }
        if (!sawEnd && !r.abort.signal.aborted) await send({ run, done: true }, r.abort.signal);
      } catch (e) {
        if (!r.abort.signal.aborted) await send({ run, error: channelError(e) }, r.abort.signal);
      } finally {
        if (runs.get(run) === r) runs.delete(run);
        endIfDrained();
      }
    };

    call.on("data", (m: WireChannelRequest) => {
      const r = runs.get(m.run);
      if (m.start) {
        if (r || channels.draining) {
          const why = r
            ? new BerthError("invalid_request", `run ${m.run} is already in use`)
            : new BerthError("unavailable", "the agent is stopping");
          void send({ run: m.run, error: channelError(why) });
          return;
        }
        const run: Run = { abort: new AbortController(), credit: RUN_WINDOW };
        runs.set(m.run, run);
        void start(m.run, run, m.start as { containerId: string; request: WireExecRequest | null });
      } else if (m.cancel && r) {
        r.abort.abort();
        r.wake?.();
      } else if (m.credit && r) {
        r.credit += m.credit;
        r.wake?.();
        r.wake = undefined;
      }
      // A cancel or credit for a run that already ended is late, not wrong.
    });
    const stopAll = () => {
      open = false;
      forget();
      for (const r of runs.values()) {
        r.abort.abort();
        r.wake?.();
      }
      runs.clear();
    };
    call.on("cancelled", stopAll);
    call.on("error", stopAll);
    call.on("end", () => {
      clientDone = true;
      endIfDrained();
    });
  };
}
