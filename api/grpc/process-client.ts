// SandboxProcessApi over gRPC (the calls behind AgentRpcClient) and the wire
// forms both ends convert alike. Every unary call has a deadline: a wait
// without a timeout is a series of WaitProcess calls of at most
// WAIT_SLICE_MS each, so no call is ever unbounded; FollowProcessOutput has
// none, it ends with the process or when the caller aborts.

import * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { ExecRequest } from "../containers.ts";
import type {
  OutputStream,
  ProcessInfo,
  ProcessOutput,
  ProcessRunEvent,
  ProcessStatus,
  SandboxProcessApi,
} from "../processes.ts";
import { type RpcChannel, type UnaryMethod, method, streamCall, unaryCall } from "./container-client.ts";
import { execRequestToProto } from "./container-convert.ts";
import { fromGrpcError } from "./errors.ts";
import { ChannelUnsupported, ProcessChannelClient } from "./process-channel.ts";

/** Longest single WaitProcess call; a longer wait asks again. */
export const WAIT_SLICE_MS = 30_000;
/** Largest data field of one WriteProcessStdin message. */
const STDIN_CHUNK_BYTES = 1024 * 1024;

export interface WireProcessInfo {
  pid: number;
  args: string[];
  cwd?: string | null;
  exitCode: number;
  status: string;
  startedAt: number;
  endedAt?: number | null;
  error?: string | null;
}

/** ProcessRunEvent on the wire: `event` names the one field set. */
export interface WireProcessRunEvent {
  event?: "started" | "stdout" | "stderr" | "ended";
  started?: WireProcessInfo | null;
  stdout?: Buffer;
  stderr?: Buffer;
  ended?: WireProcessInfo | null;
}

export function runEventToProto(e: ProcessRunEvent): WireProcessRunEvent {
  if (e.type === "output")
    return { [e.stream]: Buffer.from(e.data.buffer, e.data.byteOffset, e.data.byteLength) };
  return { [e.type]: processInfoToProto(e.process) };
}

export function runEventFromProto(w: WireProcessRunEvent): ProcessRunEvent {
  if ((w.event === "started" || w.event === "ended") && w[w.event]) {
    return { type: w.event, process: processInfoFromProto(w[w.event] as WireProcessInfo) };
  }
  if (w.event === "stdout" || w.event === "stderr") {
    return { type: "output", stream: w.event, data: bytesOf(w[w.event] ?? Buffer.alloc(0)) };
  }
  throw new BerthError(
    "internal",
    `agent reply: a RunProcess event with no event set (${JSON.stringify(w.event)})`,
  );
}

export interface WireProcessOutputChunk {
  start: number;
  offset: number;
  data: Buffer;
}

const bytesOf = (b: Buffer) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength);

const STATUSES: readonly ProcessStatus[] = ["running", "exited", "killed", "error"];

export function processInfoToProto(p: ProcessInfo): WireProcessInfo {
  return {
    pid: p.pid,
    args: [...p.args],
    ...(p.cwd !== null ? { cwd: p.cwd } : {}),
    exitCode: p.exitCode,
    status: p.status,
    startedAt: p.startedAt,
    ...(p.endedAt !== undefined ? { endedAt: p.endedAt } : {}),
    ...(p.error !== undefined ? { error: p.error } : {}),
  };
}

export function processInfoFromProto(w: WireProcessInfo): ProcessInfo {
  if (!(STATUSES as readonly string[]).includes(w.status))
    throw new BerthError("internal", `agent reply: process ${w.pid} has status ${JSON.stringify(w.status)}`);
  return {
    pid: w.pid,
    args: [...w.args],
    cwd: w.cwd ?? null,
    exitCode: w.exitCode,
    status: w.status as ProcessStatus,
    startedAt: w.startedAt,
    ...(w.endedAt !== undefined && w.endedAt !== null ? { endedAt: w.endedAt } : {}),
    ...(w.error !== undefined && w.error !== null ? { error: w.error } : {}),
  };
}

export class ProcessRpcClient implements SandboxProcessApi {
  private readonly channel: ProcessChannelClient;

  constructor(private readonly ch: RpcChannel) {
    this.channel = new ProcessChannelClient(ch);
  }

  /** Ends the process channel: no new runs on it, the runs on it finish. */
  close(): void {
    this.channel.close();
  }

  async startProcess(containerId: string, req: ExecRequest): Promise<ProcessInfo> {
    const wire = { containerId, request: execRequestToProto(req) };
    return processInfoFromProto((await unaryCall(this.ch, "StartProcess", wire)) as WireProcessInfo);
  }

  async listProcesses(containerId: string): Promise<ProcessInfo[]> {
    const res = (await unaryCall(this.ch, "ListProcesses", { containerId })) as {
      processes: WireProcessInfo[];
    };
    return res.processes.map(processInfoFromProto);
  }

  async getProcess(containerId: string, pid: number): Promise<ProcessInfo> {
    return processInfoFromProto(
      (await unaryCall(this.ch, "GetProcess", { containerId, pid })) as WireProcessInfo,
    );
  }

  async writeProcessStdin(
    containerId: string,
    pid: number,
    data: Uint8Array,
    opts: { eof?: boolean } = {},
  ): Promise<void> {
    for (let off = 0; off < data.byteLength || off === 0; off += STDIN_CHUNK_BYTES) {
      const part = data.subarray(off, off + STDIN_CHUNK_BYTES);
      const last = off + STDIN_CHUNK_BYTES >= data.byteLength;
      const wire = { containerId, pid, data: Buffer.from(part), eof: last && opts.eof === true };
      await unaryCall(this.ch, "WriteProcessStdin", wire);
    }
  }

  async killProcess(containerId: string, pid: number, signal?: NodeJS.Signals): Promise<void> {
    await unaryCall(this.ch, "KillProcess", { containerId, pid, signal: signal ?? "" });
  }

  /** Asks in calls of at most WAIT_SLICE_MS each until the process ends, the timeout passes or the signal aborts. */
  async waitProcess(
    containerId: string,
    pid: number,
    opts: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<ProcessInfo> {
    const until = opts.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + opts.timeoutMs;
    for (;;) {
      const slice = Math.max(0, Math.min(WAIT_SLICE_MS, until - Date.now()));
      const info = await this.waitOnce(containerId, pid, slice, opts.signal);
      if (info.status !== "running" || Date.now() >= until || opts.signal?.aborted) return info;
    }
  }

  async readProcessOutput(
    containerId: string,
    pid: number,
    stream: OutputStream,
    offset: number,
  ): Promise<ProcessOutput> {
    const w = (await unaryCall(this.ch, "ReadProcessOutput", {
      containerId,
      pid,
      stream,
      offset,
    })) as WireProcessOutputChunk;
    return { start: w.start, offset: w.offset, data: bytesOf(w.data) };
  }

  /** Aborting `signal` (or leaving the loop) cancels the follow on the agent. */
  async *followProcessOutput(
    containerId: string,
    pid: number,
    stream: OutputStream,
    offset: number,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<Uint8Array> {
    const req = { containerId, pid, stream, offset };
    for await (const w of streamCall<WireProcessOutputChunk>(this.ch, "FollowProcessOutput", req, {
      ...opts,
      highWater: 16,
    }))
      if (w.data.length > 0) yield bytesOf(w.data);
  }

  /**
   * On the agent's process channel (process-channel.ts), or as a RunProcess
   * call where the agent has none. Aborting `signal` (or leaving the loop)
   * stops the events; the process runs on.
   */
  async *runProcess(
    containerId: string,
    req: ExecRequest,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<ProcessRunEvent> {
    if (!this.channel.unsupported) {
      try {
        for await (const w of this.channel.run<WireProcessRunEvent>(containerId, req, opts.signal))
          yield runEventFromProto(w);
        return;
      } catch (e) {
        // Thrown before any event: nothing ran, so the run starts again as a call.
        if (!(e instanceof ChannelUnsupported)) throw e;
      }
    }
    const wire = { containerId, request: execRequestToProto(req) };
    for await (const w of streamCall<WireProcessRunEvent>(this.ch, "RunProcess", wire, {
      ...opts,
      highWater: 16,
    }))
      yield runEventFromProto(w);
  }

  /** One WaitProcess call of at most `ms`; an abort cancels it and answers the status as it is then. */
  private waitOnce(containerId: string, pid: number, ms: number, signal?: AbortSignal): Promise<ProcessInfo> {
    if (signal?.aborted) return this.getProcess(containerId, pid);
    const deadlineMs = ms + this.ch.deadlineMs;
    return new Promise((resolve, reject) => {
      let call: grpc.ClientUnaryCall | undefined;
      const onAbort = () => call?.cancel();
      signal?.addEventListener("abort", onAbort, { once: true });
      call = method<UnaryMethod>(this.ch, "WaitProcess").call(
        this.ch.client,
        { containerId, pid, timeoutMs: ms },
        new grpc.Metadata(),
        { deadline: new Date(Date.now() + deadlineMs) },
        (err, res) => {
          signal?.removeEventListener("abort", onAbort);
          if (!err) resolve(processInfoFromProto(res as WireProcessInfo));
          else if (signal?.aborted && err.code === grpc.status.CANCELLED)
            resolve(this.getProcess(containerId, pid));
          else reject(fromGrpcError(err, { address: this.ch.address, deadlineMs }));
        },
      );
    });
  }
}
