// The processes an agent runs in its sandbox containers (docs/sandboxes.md,
// Processes): per container, pids 1, 2, ... each an exec session, whose
// stdout, stderr and both combined are kept in bounded buffers that readers
// follow live. The table lives in the agent, beside the containers: every
// coordinator asks it (api/processes.ts), so a coordinator's death changes
// nothing for a running process. What an agent restart does to the table is
// process-records.ts's.

import type {
  ExecRequest,
  ExecSession,
  OutputStream,
  ProcessInfo,
  ProcessOutput,
  ProcessRunEvent,
  SandboxProcessApi,
} from "../../api/index.ts";
import { OUTPUT_STREAMS } from "../../api/index.ts";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import { OUTPUT_BUFFER_BYTES, OutputBuffer } from "./output-buffer.ts";
import { ProcessRecords } from "./process-records.ts";

/** How long after a start or an end its container's records are written (ProcessTable.saveSoon). */
export const RECORD_DELAY_MS = 25;

export interface ProcessTableOptions {
  /** Starts an exec session in a container (ContainerApi.exec). */
  exec(containerId: string, req: ExecRequest): Promise<ExecSession>;
  /** Throws not_found for a container the agent does not have. @default every container is known */
  known?: (containerId: string) => void;
  /** Bytes kept of each stream. @default 1 MiB */
  bufferBytes?: number;
  /** Processes kept per container, running and ended; the oldest ended ones make room. @default 128 */
  maxProcesses?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
  /** Where each container's processes are recorded, so an agent restart can say what became of them. @default none */
  recordDir?: string;
}

export class SandboxProcess {
  readonly stdout: OutputBuffer;
  readonly stderr: OutputBuffer;
  readonly combined: OutputBuffer;
  /** Resolves once the process has ended and its output is all in the buffers. */
  readonly done: Promise<void>;
  private info: ProcessInfo;
  private killRequested = false;

  /** Without a session: a process known from its record only (it has ended; its output is gone). */
  constructor(
    info: ProcessInfo,
    bufferBytes: number,
    private readonly clock: () => number,
    private readonly session?: ExecSession,
    onEnd?: (p: SandboxProcess) => void,
  ) {
    this.stdout = new OutputBuffer(bufferBytes);
    this.stderr = new OutputBuffer(bufferBytes);
    this.combined = new OutputBuffer(bufferBytes);
    this.info = { ...info };
    if (session) {
      this.done = this.pump(session).then(() => onEnd?.(this));
    } else {
      for (const b of [this.stdout, this.stderr, this.combined]) b.close();
      this.done = Promise.resolve();
    }
  }

  get pid(): number {
    return this.info.pid;
  }
  get status(): ProcessInfo {
    return { ...this.info, args: [...this.info.args] };
  }
  get running(): boolean {
    return this.info.status === "running";
  }

  output(stream: OutputStream): OutputBuffer {
    return this[stream];
  }

  /** failed_precondition when the process has ended. */
  writeStdin(data: Uint8Array): void {
    if (!this.running || !this.session)
      throw new BerthError(
        "failed_precondition",
        `cannot write to stdin of process ${this.pid}: it has ended`,
        {
          pid: this.pid,
        },
      );
    this.session.writeStdin(data);
  }

  closeStdin(): void {
    if (this.running) this.session?.closeStdin();
  }

  /** Sends a signal; an ended process is left as it is. */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (!this.running || !this.session) return;
    this.killRequested = true;
    this.session.kill(signal);
  }

  /** Its status once it ends, or after timeoutMs (or the signal) with exit code -1 when still running. */
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
          if (signal.aborted) r();
          else signal.addEventListener("abort", onAbort, { once: true });
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

  private async pump(session: ExecSession): Promise<void> {
    let error: string | undefined;
    let code = -1;
    try {
      for await (const o of session.output) {
        (o.stream === "stderr" ? this.stderr : this.stdout).append(o.data);
        this.combined.append(o.data);
      }
      code = await session.exit;
    } catch (e) {
      error = `the agent lost the process: ${describeError(e)}`;
      try {
        code = await Promise.race([session.exit, Promise.resolve(-1)]);
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

interface ContainerProcesses {
  next: number;
  procs: Map<number, SandboxProcess>;
}

/** Every sandbox container's processes on this agent. */
export class ProcessTable implements SandboxProcessApi {
  private readonly byContainer = new Map<string, ContainerProcesses>();
  private readonly bufferBytes: number;
  private readonly maxProcesses: number;
  private readonly clock: () => number;
  private readonly records?: ProcessRecords;
  /** Containers whose records are due (saveSoon); written together a moment later. */
  private readonly unsaved = new Set<string>();
  /** After close(): nothing more is recorded (the next agent process owns the records). */
  private closed = false;

  constructor(private readonly o: ProcessTableOptions) {
    this.bufferBytes = o.bufferBytes ?? OUTPUT_BUFFER_BYTES;
    this.maxProcesses = o.maxProcesses ?? 128;
    this.clock = o.clock ?? Date.now;
    if (!Number.isInteger(this.maxProcesses) || this.maxProcesses < 1)
      throw new Error(`process table: maxProcesses must be a positive integer, got ${this.maxProcesses}`);
    if (o.recordDir) this.records = new ProcessRecords(o.recordDir);
  }

  /**
   * After an agent restart: the processes recorded for containers that still
   * run come back as they were, those that ran then as `error` (the exec
   * sessions went with the old agent process); other containers' records go.
   */
  recover(liveContainerIds: Iterable<string>): void {
    if (!this.records) return;
    const now = this.clock();
    for (const { containerId, next, processes } of this.records.recover(new Set(liveContainerIds), now)) {
      const procs = new Map<number, SandboxProcess>();
      for (const info of processes) procs.set(info.pid, new SandboxProcess(info, 1, this.clock));
      this.byContainer.set(containerId, { next, procs });
    }
  }

  async startProcess(containerId: string, req: ExecRequest): Promise<ProcessInfo> {
    if (!Array.isArray(req.args) || req.args.length === 0 || req.args[0] === "")
      throw invalid("args must name a program to run");
    this.o.known?.(containerId);
    const entry = this.entry(containerId);
    this.makeRoom(containerId, entry.procs);
    const session = await this.o.exec(containerId, { ...req, tty: false });
    const pid = entry.next++;
    const info: ProcessInfo = {
      pid,
      args: [...req.args],
      cwd: req.cwd ?? null,
      exitCode: -1,
      status: "running",
      startedAt: this.clock(),
    };
    const p = new SandboxProcess(info, this.bufferBytes, this.clock, session, () =>
      this.saveSoon(containerId),
    );
    entry.procs.set(pid, p);
    this.saveSoon(containerId);
    return p.status;
  }

  async listProcesses(containerId: string): Promise<ProcessInfo[]> {
    this.o.known?.(containerId);
    return [...(this.byContainer.get(containerId)?.procs.values() ?? [])].map((p) => p.status);
  }

  async getProcess(containerId: string, pid: number): Promise<ProcessInfo> {
    return this.get(containerId, pid).status;
  }

  async writeProcessStdin(
    containerId: string,
    pid: number,
    data: Uint8Array,
    opts: { eof?: boolean } = {},
  ): Promise<void> {
    const p = this.get(containerId, pid);
    if (data.length > 0) p.writeStdin(data);
    if (opts.eof) p.closeStdin();
  }

  async killProcess(containerId: string, pid: number, signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    this.get(containerId, pid).kill(signal);
  }

  async waitProcess(
    containerId: string,
    pid: number,
    opts: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<ProcessInfo> {
    if (opts.timeoutMs !== undefined && !(Number.isFinite(opts.timeoutMs) && opts.timeoutMs >= 0))
      throw invalid(`timeoutMs must be a number >= 0, got ${opts.timeoutMs}`);
    return this.get(containerId, pid).wait(opts.timeoutMs, opts.signal);
  }

  async readProcessOutput(
    containerId: string,
    pid: number,
    stream: OutputStream,
    offset: number,
  ): Promise<ProcessOutput> {
    const buf = this.get(containerId, pid).output(checkStream(stream));
    const { offset: from, data } = buf.read(checkOffset(offset));
    return { start: buf.start, offset: from, data };
  }

  async *followProcessOutput(
    containerId: string,
    pid: number,
    stream: OutputStream,
    offset: number,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<Uint8Array> {
    const buf = this.get(containerId, pid).output(checkStream(stream));
    yield* buf.follow(checkOffset(offset), opts.signal);
  }

  /**
   * Starts a process and streams what becomes of it (SandboxProcessApi.runProcess):
   * one call where a client otherwise makes three.
   */
  async *runProcess(
    containerId: string,
    req: ExecRequest,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<ProcessRunEvent> {
    const info = await this.startProcess(containerId, req);
    yield { type: "started", process: info };
    const p = this.get(containerId, info.pid);
    for await (const o of taggedOutput(p, opts.signal)) yield { type: "output", ...o };
    if (opts.signal?.aborted) return;
    await p.done;
    yield { type: "ended", process: p.status };
  }

  /** Writes the records still due and stops recording (an agent handing over to its next process); the sessions are left as they are. */
  close(): void {
    this.saveDue();
    this.closed = true;
  }

  /** The container is gone: its running processes are killed and all of them forgotten. */
  drop(containerId: string): void {
    const entry = this.byContainer.get(containerId);
    this.byContainer.delete(containerId);
    if (!this.closed) this.records?.remove(containerId);
    for (const p of entry?.procs.values() ?? []) {
      try {
        p.kill("SIGKILL");
      } catch {
        // The container is going away with it.
      }
    }
  }

  /** process_not_found when the container has no such pid. */
  private get(containerId: string, pid: number): SandboxProcess {
    this.o.known?.(containerId);
    const p = this.byContainer.get(containerId)?.procs.get(pid);
    if (!p)
      throw new BerthError("process_not_found", `sandbox ${containerId} has no process ${pid}`, {
        sandbox_id: containerId,
        pid,
      });
    return p;
  }

  private entry(containerId: string): ContainerProcesses {
    let e = this.byContainer.get(containerId);
    if (!e) {
      e = { next: 1, procs: new Map() };
      this.byContainer.set(containerId, e);
    }
    return e;
  }

  /**
   * Records the container's processes a moment later, off the path of the
   * answer: a file write and rename cost 0.3–1 ms, which a start's answer and
   * an end's event (the exec round trip) waited for. Starts and ends that
   * come meanwhile are written once, so a short process's start and end make
   * one write; the moment is longer than such a process's round trip, which
   * a write 1 ms after its start still landed in. An agent that dies in
   * between loses them as it loses a process started just before it died.
   */
  private saveSoon(containerId: string): void {
    if (!this.records || this.closed) return;
    if (this.unsaved.size === 0) setTimeout(() => this.saveDue(), RECORD_DELAY_MS).unref();
    this.unsaved.add(containerId);
  }

  private saveDue(): void {
    const due = [...this.unsaved];
    this.unsaved.clear();
    for (const id of due) this.save(id);
  }

  /** Records the container's processes (when it still has a table: a dropped one stays dropped). */
  private save(containerId: string): void {
    const e = this.byContainer.get(containerId);
    if (!this.records || !e || this.closed) return;
    this.records.write(
      containerId,
      e.next,
      [...e.procs.values()].map((p) => p.status),
    );
  }

  private makeRoom(containerId: string, procs: Map<number, SandboxProcess>): void {
    if (procs.size < this.maxProcesses) return;
    for (const [pid, p] of procs) {
      if (!p.running) {
        procs.delete(pid);
        return;
      }
    }
    throw new BerthError(
      "resource_exhausted",
      `sandbox ${containerId} already runs ${procs.size} processes, the most one sandbox may run at once`,
      { limit: this.maxProcesses },
    );
  }
}

function checkStream(s: string): OutputStream {
  if (!(OUTPUT_STREAMS as readonly string[]).includes(s))
    throw invalid(`stream must be one of ${OUTPUT_STREAMS.join(", ")}, got ${JSON.stringify(s)}`);
  return s as OutputStream;
}

function checkOffset(n: number): number {
  if (!Number.isInteger(n) || n < 0) throw invalid(`offset must be an integer >= 0, got ${n}`);
  return n;
}

/** Chunks a reader may hold unsent before both followers wait for it. */
const TAGGED_HIGH_WATER = 16;

/**
 * stdout and stderr of `p` from offset 0, each in order, interleaved as they
 * arrive, until both are complete or the signal aborts (or the reader leaves).
 */
async function* taggedOutput(
  p: SandboxProcess,
  signal: AbortSignal | undefined,
): AsyncGenerator<{ stream: "stdout" | "stderr"; data: Uint8Array }> {
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) stop.abort();
  const queue: { stream: "stdout" | "stderr"; data: Uint8Array }[] = [];
  let wakeReader: (() => void) | undefined;
  let wakeFollowers: (() => void)[] = [];
  let open = 2;
  const follow = async (stream: "stdout" | "stderr") => {
    try {
      for await (const data of p.output(stream).follow(0, stop.signal)) {
        queue.push({ stream, data });
        wakeReader?.();
        while (queue.length >= TAGGED_HIGH_WATER && !stop.signal.aborted) {
          await new Promise<void>((r) => wakeFollowers.push(r));
        }
      }
    } finally {
      open--;
      wakeReader?.();
    }
  };
  const followers = [follow("stdout"), follow("stderr")];
  try {
    for (;;) {
      const item = queue.shift();
      if (item) {
        if (queue.length < TAGGED_HIGH_WATER) {
          const w = wakeFollowers;
          wakeFollowers = [];
          for (const f of w) f();
        }
        yield item;
        continue;
      }
      if (open === 0 || stop.signal.aborted) return;
      await new Promise<void>((r) => {
        wakeReader = r;
      });
      wakeReader = undefined;
    }
  } finally {
    stop.abort();
    for (const f of wakeFollowers) f();
    signal?.removeEventListener("abort", onAbort);
    await Promise.all(followers);
  }
}
