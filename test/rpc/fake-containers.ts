// An in-memory ContainerApi for exercising the transport (and the edge CLI
// over it): it records what reached it and answers from fields the test sets.
// Exec understands a few commands:
//   upper       echoes stdin to stdout upper-cased; exits 0 when stdin closes
//   cat         echoes stdin to stdout byte for byte; exits 0 when stdin closes
//   exit N MSG  writes MSG to stdout and "bye\n" to stderr, exits N
//   sleep       waits until killed (exit 128+signo)

import { constants } from "node:os";
import { AsyncQueue } from "../../api/grpc/index.ts";
import type {
  ContainerApi,
  ContainerStatus,
  ExecOutput,
  ExecRequest,
  ExecSession,
  ImageGcResult,
  ImageSummary,
  ImportImageRequest,
  LogEntry,
  RunContainerRequest,
} from "../../api/index.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";

export function sampleStatus(id: string, over: Partial<ContainerStatus> = {}): ContainerStatus {
  return {
    id,
    image: "docker.io/library/python:3.12-slim",
    imageDigest: "sha256:0123456789abcdef",
    state: "running",
    pid: 4242,
    createdAt: 1_700_000_000_123,
    startedAt: 1_700_000_000_456,
    labels: { app: "web", "berth.dev/sandbox": "sb-1" },
    cpu: 0.5,
    memoryBytes: 64 * 1024 * 1024,
    gpus: [],
    ipv4: "10.88.0.2",
    egress: { mode: "open" },
    exposedPorts: [],
    ...over,
  };
}

export const sampleImage: ImageSummary = {
  ref: "docker.io/library/python:3.12-slim",
  refs: ["docker.io/library/python:3.12-slim", "python:3.12-slim"],
  digest: "sha256:feedface",
  // Above 2^32, so a uint64 truncated to 32 bits would show.
  sizeBytes: 5_000_000_000,
  pulledAt: "2024-05-01T12:00:00.000Z",
  inUse: true,
};

const upper = (b: Uint8Array) => Uint8Array.from(b, (c) => (c >= 0x61 && c <= 0x7a ? c - 32 : c));

export class FakeExecSession implements ExecSession {
  readonly queue = new AsyncQueue<ExecOutput>();
  readonly output: AsyncIterable<ExecOutput> = this.queue;
  readonly exit: Promise<number>;
  stdinClosed = false;
  killedWith?: NodeJS.Signals | "default";
  resized?: [number, number];
  private settle!: (code: number) => void;

  constructor(readonly req: ExecRequest) {
    this.exit = new Promise((resolve) => {
      this.settle = resolve;
    });
    const [cmd, arg, msg] = req.args;
    if (cmd === "exit") {
      this.queue.push({ stream: "stdout", data: Buffer.from(msg ?? "") });
      this.queue.push({ stream: "stderr", data: Buffer.from("bye\n") });
      this.end(Number(arg));
    }
  }

  writeStdin(data: Uint8Array): void {
    const cmd = this.req.args[0];
    if (cmd === "upper") this.queue.push({ stream: "stdout", data: upper(data) });
    else if (cmd === "cat") this.queue.push({ stream: "stdout", data: Uint8Array.from(data) });
  }

  closeStdin(): void {
    this.stdinClosed = true;
    if (this.req.args[0] === "upper" || this.req.args[0] === "cat") this.end(0);
  }

  resize(cols: number, rows: number): void {
    this.resized = [cols, rows];
  }

  kill(signal?: NodeJS.Signals): void {
    this.killedWith = signal ?? "default";
    this.end(128 + constants.signals[signal ?? "SIGKILL"]);
  }

  private end(code: number): void {
    this.queue.end();
    this.settle(code);
  }
}

export class FakeContainers implements ContainerApi {
  readonly calls: { method: string; args: unknown[] }[] = [];
  readonly statuses = new Map<string, ContainerStatus>();
  readonly logs = new Map<string, LogEntry[]>();
  readonly execs: FakeExecSession[] = [];
  images: ImageSummary[] = [sampleImage];
  /** When set, every call rejects with it. */
  failWith?: unknown;
  /** The signal of the last streamLogs call, to see cancellation arrive. */
  lastLogSignal?: AbortSignal;
  private readonly followers = new Set<() => void>();
  private readonly ended = new Set<string>();

  private record(method: string, ...args: unknown[]): void {
    this.calls.push({ method, args });
    if (this.failWith !== undefined) throw this.failWith;
  }

  lastCall(method: string): unknown[] | undefined {
    return this.calls.filter((c) => c.method === method).at(-1)?.args;
  }

  private status(id: string): ContainerStatus {
    const s = this.statuses.get(id);
    if (!s) throw new BerthError("not_found", `container ${id} not found`, { containerId: id });
    return s;
  }

  async runContainer(req: RunContainerRequest): Promise<ContainerStatus> {
    this.record("runContainer", req);
    const id = req.id ?? `ctr-${this.statuses.size + 1}`;
    const s = sampleStatus(id, {
      image: req.image ?? "berth-default",
      labels: { ...req.labels },
      cpu: req.cpu,
      memoryBytes: req.memoryBytes,
      egress: req.egress ?? { mode: "open" },
      exposedPorts: req.exposedPorts ?? [],
    });
    this.statuses.set(id, s);
    return s;
  }

  async stopContainer(id: string, opts?: { graceMs?: number; remove?: boolean }): Promise<ContainerStatus> {
    this.record("stopContainer", id, opts);
    const s = { ...this.status(id), state: "stopped" as const, exitCode: 143, reason: "killed" as const };
    s.exitedAt = 1_700_000_009_000;
    if (opts?.remove) this.statuses.delete(id);
    else this.statuses.set(id, s);
    return s;
  }

  async getContainer(id: string): Promise<ContainerStatus> {
    this.record("getContainer", id);
    return this.status(id);
  }

  async listContainers(filter?: { labels?: Record<string, string> }): Promise<ContainerStatus[]> {
    this.record("listContainers", filter);
    const want = Object.entries(filter?.labels ?? {});
    return [...this.statuses.values()].filter((s) => want.every(([k, v]) => s.labels[k] === v));
  }

  /** Adds a log line and wakes followers. */
  appendLog(id: string, stream: "stdout" | "stderr", line: string): void {
    const list = this.logs.get(id) ?? [];
    list.push({ containerId: id, stream, line, ts: 1_700_000_000_000 + list.length });
    this.logs.set(id, list);
    for (const wake of this.followers) wake();
  }

  /** Ends the container's log (followers finish). */
  endLogs(id: string): void {
    this.ended.add(id);
    for (const wake of this.followers) wake();
  }

  async *streamLogs(
    id: string,
    opts: { follow?: boolean; tail?: number; signal?: AbortSignal } = {},
  ): AsyncIterable<LogEntry> {
    this.record("streamLogs", id, { follow: opts.follow, tail: opts.tail });
    this.status(id);
    this.lastLogSignal = opts.signal;
    const all = this.logs.get(id) ?? [];
    let next = opts.tail === undefined ? 0 : Math.max(0, all.length - opts.tail);
    for (;;) {
      const list = this.logs.get(id) ?? [];
      while (next < list.length) yield list[next++]!;
      if (!opts.follow || this.ended.has(id) || opts.signal?.aborted) return;
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.followers.delete(wake);
          opts.signal?.removeEventListener("abort", wake);
          resolve();
        };
        this.followers.add(wake);
        opts.signal?.addEventListener("abort", wake);
      });
    }
  }

  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    this.record("exec", id, req);
    this.status(id);
    const session = new FakeExecSession(req);
    this.execs.push(session);
    return session;
  }

  async pullImage(
    ref: string,
    opts?: { credentials?: { username: string; password: string } },
  ): Promise<ImageSummary> {
    this.record("pullImage", ref, opts);
    const found = this.images.find((i) => i.refs.includes(ref));
    if (!found) throw new BerthError("not_found", `image ${ref} not found in its registry`, { ref });
    return found;
  }

  async listImages(): Promise<ImageSummary[]> {
    this.record("listImages");
    return this.images;
  }

  async removeImage(ref: string): Promise<void> {
    this.record("removeImage", ref);
    if (!this.images.some((i) => i.refs.includes(ref)))
      throw new BerthError("not_found", `image ${ref} not found`);
    this.images = this.images.filter((i) => !i.refs.includes(ref));
  }

  /** Names the import after req.name, with a digest made from the path; refuses a missing path. */
  async importImage(req: ImportImageRequest): Promise<ImageSummary> {
    this.record("importImage", req);
    if (!req.path.startsWith("/"))
      throw new BerthError("invalid_request", `import path ${req.path} is relative`);
    const image: ImageSummary = {
      ref: req.name,
      refs: [req.name],
      digest: `sha256:${Buffer.from(req.path).toString("hex").slice(0, 16)}`,
      sizeBytes: 12_345,
      pulledAt: "2024-05-02T00:00:00.000Z",
      inUse: false,
    };
    this.images = [...this.images, image];
    return image;
  }

  /** Removes the images not in use; with no unusedForMs, nothing (only leftovers would go). */
  async gcImages(opts?: { unusedForMs?: number }): Promise<ImageGcResult> {
    this.record("gcImages", opts);
    if (opts?.unusedForMs === undefined) return { removedImages: [], freedBytes: 0 };
    const gone = this.images.filter((i) => !i.inUse);
    this.images = this.images.filter((i) => i.inUse);
    return {
      removedImages: gone.map((i) => i.digest),
      freedBytes: gone.reduce((n, i) => n + i.sizeBytes, 0),
    };
  }

  async setNetworkPolicy(id: string, policy: EgressPolicy): Promise<ContainerStatus> {
    this.record("setNetworkPolicy", id, policy);
    const s = { ...this.status(id), egress: policy };
    this.statuses.set(id, s);
    return s;
  }

  async exposePort(id: string, port: number): Promise<ContainerStatus> {
    this.record("exposePort", id, port);
    const before = this.status(id);
    const s = { ...before, exposedPorts: [...new Set([...before.exposedPorts, port])] };
    this.statuses.set(id, s);
    return s;
  }

  /** Archives put with putCode, by sha256 as given (not checked: the real CodeStore does that). */
  readonly code = new Map<string, Buffer>();

  async hasCode(sha256: string): Promise<boolean> {
    this.record("hasCode", sha256);
    return this.code.has(sha256);
  }

  async putCode(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void> {
    this.record("putCode", sha256);
    const parts: Buffer[] = [];
    for await (const chunk of data) parts.push(Buffer.from(chunk));
    this.code.set(sha256, Buffer.concat(parts));
  }
}
