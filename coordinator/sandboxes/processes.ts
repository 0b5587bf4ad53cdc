// The processes a coordinator runs in its sandboxes (docs/sandboxes.md,
// Processes): per sandbox, pids 1, 2, ... each an exec session on the agent,
// whose stdout, stderr and both combined are kept in bounded buffers that
// readers follow live. The table lives in this coordinator's memory: a
// restarted coordinator no longer knows the processes the old one started.

import type { ExecRequest, ExecSession } from "../../api/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { OUTPUT_BUFFER_BYTES, OutputBuffer } from "./output-buffer.ts";

/** running; exited (ended by itself); killed (ended after a kill call); error (the agent lost it). */
export type ProcessStatus = "running" | "exited" | "killed" | "error";
export type OutputStream = "stdout" | "stderr" | "combined";

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

export interface ProcessTableOptions {
  /** Bytes kept of each stream. @default 1 MiB */
  bufferBytes?: number;
  /** Processes kept per sandbox, running and ended; the oldest ended ones make room. @default 128 */
  maxProcesses?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

/** What starting a process needs of the sandbox's agent. */
export interface ExecTarget {
  exec(containerId: string, req: ExecRequest): Promise<ExecSession>;
}

export class SandboxProcess {
  readonly stdout: OutputBuffer;
  readonly stderr: OutputBuffer;
  readonly combined: OutputBuffer;
  /** Resolves once the process has ended and its output is all in the buffers. */
  readonly done: Promise<void>;
  private info: ProcessInfo;
  private killRequested = false;

  constructor(
    readonly pid: number,
    private readonly session: ExecSession,
    req: ExecRequest,
    bufferBytes: number,
    private readonly clock: () => number,
  ) {
    this.stdout = new OutputBuffer(bufferBytes);
    this.stderr = new OutputBuffer(bufferBytes);
    this.combined = new OutputBuffer(bufferBytes);
    this.info = {
      pid,
      args: [...req.args],
      cwd: req.cwd ?? null,
      exitCode: -1,
      status: "running",
      startedAt: clock(),
    };
    this.done = this.pump();
  }

  get status(): ProcessInfo {
    return { ...this.info };
  }
  get running(): boolean {
    return this.info.status === "running";
  }

  output(stream: OutputStream): OutputBuffer {
    return this[stream];
  }

  /** failed_precondition when the process has ended. */
  writeStdin(data: Uint8Array): void {
    this.mustRun("write to stdin of");
    this.session.writeStdin(data);
  }

  closeStdin(): void {
    if (this.running) this.session.closeStdin();
  }

  /** Sends a signal; an ended process is left as it is. */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (!this.running) return;
    this.killRequested = true;
    this.session.kill(signal);
  }

  /** Its status once it ends, or after timeoutMs with exit code -1 when still running. */
  async wait(timeoutMs?: number, signal?: AbortSignal): Promise<ProcessInfo> {
    if (!this.running) return this.status;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stops: Promise<void>[] = [this.done];
    if (timeoutMs !== undefined)
      stops.push(
        new Promise((r) => {
          timer = setTimeout(r, timeoutMs);
        }),
      );
    if (signal)
      stops.push(
        new Promise((r) => {
          onAbort = () => r();
          signal.addEventListener("abort", onAbort, { once: true });
        }),
      );
    try {
      await Promise.race(stops);
    } finally {
      if (timer) clearTimeout(timer);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
    return this.status;
  }

  private mustRun(what: string): void {
    if (!this.running)
      throw new BerthError("failed_precondition", `cannot ${what} process ${this.pid}: it has ended`, {
        pid: this.pid,
      });
  }

  private async pump(): Promise<void> {
    let error: string | undefined;
    let code = -1;
    try {
      for await (const o of this.session.output) {
        (o.stream === "stderr" ? this.stderr : this.stdout).append(o.data);
        this.combined.append(o.data);
      }
      code = await this.session.exit;
    } catch (e) {
      error = `the agent lost the process: ${describeError(e)}`;
      try {
        code = await Promise.race([this.session.exit, Promise.resolve(-1)]);
      } catch {
        code = -1;
      }
    }
    this.info = {
      ...this.info,
      exitCode: error ? 255 : code,
      status: error ? "error" : this.killRequested ? "killed" : "exited",
      endedAt: this.clock(),
      ...(error ? { error } : {}),
    };
    for (const b of [this.stdout, this.stderr, this.combined]) b.close();
  }
}

/** Every sandbox's processes on this coordinator. */
export class ProcessTable {
  private readonly bySandbox = new Map<string, { next: number; procs: Map<number, SandboxProcess> }>();
  private readonly bufferBytes: number;
  private readonly maxProcesses: number;
  private readonly clock: () => number;

  constructor(o: ProcessTableOptions = {}) {
    this.bufferBytes = o.bufferBytes ?? OUTPUT_BUFFER_BYTES;
    this.maxProcesses = o.maxProcesses ?? 128;
    this.clock = o.clock ?? Date.now;
    if (!Number.isInteger(this.maxProcesses) || this.maxProcesses < 1)
      throw new Error(`process table: maxProcesses must be a positive integer, got ${this.maxProcesses}`);
  }

  /** Starts a process in the sandbox's container; its pid is the next of the sandbox. */
  async start(sandboxId: string, agent: ExecTarget, req: ExecRequest): Promise<SandboxProcess> {
    const entry = this.entry(sandboxId);
    this.makeRoom(sandboxId, entry.procs);
    const session = await agent.exec(sandboxId, { ...req, tty: false });
    const pid = entry.next++;
    const p = new SandboxProcess(pid, session, req, this.bufferBytes, this.clock);
    entry.procs.set(pid, p);
    return p;
  }

  /** process_not_found when the sandbox has no such pid (here). */
  get(sandboxId: string, pid: number): SandboxProcess {
    const p = this.bySandbox.get(sandboxId)?.procs.get(pid);
    if (!p)
      throw new BerthError("process_not_found", `sandbox ${sandboxId} has no process ${pid}`, {
        sandbox_id: sandboxId,
        pid,
      });
    return p;
  }

  list(sandboxId: string): ProcessInfo[] {
    return [...(this.bySandbox.get(sandboxId)?.procs.values() ?? [])].map((p) => p.status);
  }

  /** Whether any process of the sandbox still runs (that is activity: the TTL does not run out). */
  hasRunning(sandboxId: string): boolean {
    for (const p of this.bySandbox.get(sandboxId)?.procs.values() ?? []) if (p.running) return true;
    return false;
  }

  sandboxIds(): string[] {
    return [...this.bySandbox.keys()];
  }

  /** The sandbox ended: its running processes are killed and all of them forgotten. */
  drop(sandboxId: string): void {
    const entry = this.bySandbox.get(sandboxId);
    if (!entry) return;
    this.bySandbox.delete(sandboxId);
    for (const p of entry.procs.values()) {
      try {
        p.kill("SIGKILL");
      } catch {
        // The container is going away with it.
      }
    }
  }

  private entry(sandboxId: string) {
    let e = this.bySandbox.get(sandboxId);
    if (!e) {
      e = { next: 1, procs: new Map() };
      this.bySandbox.set(sandboxId, e);
    }
    return e;
  }

  private makeRoom(sandboxId: string, procs: Map<number, SandboxProcess>): void {
    if (procs.size < this.maxProcesses) return;
    for (const [pid, p] of procs) {
      if (!p.running) {
        procs.delete(pid);
        return;
      }
    }
    throw new BerthError(
      "resource_exhausted",
      `sandbox ${sandboxId} already runs ${procs.size} processes, the most one sandbox may run at once`,
      { limit: this.maxProcesses },
    );
  }
}
