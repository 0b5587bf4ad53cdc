// The processes of a sandbox's container, kept by the agent that runs it
// (docs/sandboxes.md, Processes): pids 1, 2, ... per container, each with
// its stdout, stderr and both combined in bounded buffers read by absolute
// offset, its stdin, kill and wait. Any coordinator asks the agent, so a
// process outlives the coordinator that started it. Like ContainerApi, the
// agent's host and the gRPC client implement this same interface.
//
// Errors: an unknown container is not_found; an unknown pid of a known
// container is process_not_found; writing to the stdin of a process that has
// ended is failed_precondition.

import type { ExecRequest } from "./containers.ts";

/** running; exited (ended by itself); killed (ended after a kill call); error (the agent lost it). */
export type ProcessStatus = "running" | "exited" | "killed" | "error";
export type OutputStream = "stdout" | "stderr" | "combined";
export const OUTPUT_STREAMS: readonly OutputStream[] = ["stdout", "stderr", "combined"];

export interface ProcessInfo {
  pid: number;
  args: string[];
  cwd: string | null;
  /** -1 while running (the spec's convention). */
  exitCode: number;
  status: ProcessStatus;
  /** ms since epoch */
  startedAt: number;
  endedAt?: number;
  /** Why status is error. */
  error?: string;
}

/** A read of one stream: the bytes from `offset` to what has been written so far. */
export interface ProcessOutput {
  /** The first offset still kept (bytes before it were trimmed from the bounded buffer). */
  start: number;
  /** Where `data` begins: the asked offset, clamped to what is kept. */
  offset: number;
  data: Uint8Array;
}

export interface SandboxProcessApi {
  /** Starts a process in the container (never with a terminal); its pid is the container's next. */
  startProcess(containerId: string, req: ExecRequest): Promise<ProcessInfo>;
  /** Every process the agent keeps for the container, oldest first. */
  listProcesses(containerId: string): Promise<ProcessInfo[]>;
  getProcess(containerId: string, pid: number): Promise<ProcessInfo>;
  /** Writes to its stdin (failed_precondition once it ended); with eof, closes stdin after. */
  writeProcessStdin(
    containerId: string,
    pid: number,
    data: Uint8Array,
    opts?: { eof?: boolean },
  ): Promise<void>;
  /** Sends a signal (default SIGKILL); a process that has ended is left as it is. */
  killProcess(containerId: string, pid: number, signal?: NodeJS.Signals): Promise<void>;
  /** Its status once it ends, or after timeoutMs (or the signal) with exit code -1 while it still runs. */
  waitProcess(
    containerId: string,
    pid: number,
    opts?: { timeoutMs?: number; signal?: AbortSignal },
  ): Promise<ProcessInfo>;
  /** The kept bytes of one stream from `offset` on, as written so far. */
  readProcessOutput(
    containerId: string,
    pid: number,
    stream: OutputStream,
    offset: number,
  ): Promise<ProcessOutput>;
  /**
   * The bytes of one stream from `offset` on: what is kept now and what comes
   * later, until the process has ended and all of it was sent, or the signal
   * aborts. Bytes trimmed while the reader lagged are skipped.
   */
  followProcessOutput(
    containerId: string,
    pid: number,
    stream: OutputStream,
    offset: number,
    opts?: { signal?: AbortSignal },
  ): AsyncIterable<Uint8Array>;
  /**
   * startProcess, followProcessOutput of stdout and stderr, and waitProcess
   * in one call: `started` first, then the output as it is written (each
   * stream in order), then `ended` once the process ended and all of it was
   * sent. Aborting the signal (or leaving the loop) stops the stream, not the
   * process. Absent on an agent that predates it: the caller makes the three
   * calls itself.
   */
  runProcess?(
    containerId: string,
    req: ExecRequest,
    opts?: { signal?: AbortSignal },
  ): AsyncIterable<ProcessRunEvent>;
}

/** What runProcess streams. */
export type ProcessRunEvent =
  | { type: "started"; process: ProcessInfo }
  | { type: "output"; stream: "stdout" | "stderr"; data: Uint8Array }
  | { type: "ended"; process: ProcessInfo };
