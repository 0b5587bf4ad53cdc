// The one in-memory agent for tests: ContainerApi, ContainerFilesApi and
// ContainerSnapshotApi kept in maps, every call recorded. The same
// conformance suite that holds the real host and the gRPC client to the
// contract runs against it (test/conformance/fake.test.ts), so what the
// coordinator's logic tests see is what an agent does.
//
// Hooks for the tests: `calls` (every call, as [method, ...args]), `runs`,
// `failRun` (errors for the next runContainer calls), `failWith` (every call
// rejects), `gate` (holds runContainer calls), `onStop`, `exit()` (a
// container's end, as the runtime reports it), `appendLog`/`endLogs`,
// `execs` (each exec a FakeExec the test can drive; a sandbox process is
// one too: the fake keeps processes in the agent's own ProcessTable over its
// exec, as ContainerHost does), `refused` (methods that
// fail the test when called), `checkpointError`, `servesExposePort`.
//
// With `scripted: true` containers and execs also play a small vocabulary:
//   sh -c "S; S; ..."  where each S is `echo WORDS [>&2]`, `sleep SECONDS` or
//                      `exit N` (a script with anything else is left to the test)
//   upper / cat        echo stdin to stdout (upper-cased); exit 0 when stdin closes
//   exit N MSG         writes MSG to stdout and "bye\n" to stderr, exits N
//   sleep              waits until killed (exit 128+signo)
// A container runs its script once (its output becomes log lines, its exit
// the container's); an exec's output is the exec's.

import type {
  ContainerApi,
  ContainerFilesApi,
  ContainerSnapshotApi,
  ContainerStatus,
  ExecRequest,
  ExecSession,
  ExitReason,
  FileInfo,
  FileSearchMatch,
  ImageGcResult,
  ImageSummary,
  ImportImageRequest,
  LogEntry,
  ReplaceResult,
  RunContainerRequest,
  SandboxProcessApi,
} from "../../api/index.ts";
import { ProcessTable } from "../../agent/sandboxes/processes.ts";
import { FakeProcesses } from "./fake-processes.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import { FakeFileTree } from "./fake-files.ts";
import { FakeExec, parseScript, play, playExec } from "./fake-exec.ts";
import { SAMPLE_STATUS_DEFAULTS, sampleImage } from "./wire-samples.ts";

export interface FakeContainerApiOptions {
  /** Names the agent in errors. @default "agent-fake" */
  agentId?: string;
  /** GPUs handed out to runs that ask for them, first free first. */
  gpuUuids?: string[];
  /** Plays the scripted vocabulary (see the file's header). @default false: execs wait for the test */
  scripted?: boolean;
  /** Fields every new status starts with (a run's request fills in the rest). */
  statusDefaults?: Partial<ContainerStatus>;
  /** The image of a run that names none. @default "default" */
  defaultImage?: string;
  /** False: answers ExposePort as an agent from before that call (gRPC UNIMPLEMENTED) does. @default true */
  servesExposePort?: boolean;
  /** The clock of createdAt, startedAt, exitedAt and log timestamps. @default Date.now */
  now?: () => number;
}

type Call = [method: string, ...args: unknown[]];

export class FakeContainerApi
  extends FakeProcesses
  implements ContainerApi, ContainerFilesApi, ContainerSnapshotApi, SandboxProcessApi
{
  readonly agentId: string;
  readonly gpuUuids: string[];
  readonly scripted: boolean;
  /** Every call, in order, as [method, ...args]. */
  readonly calls: Call[] = [];
  /** Every runContainer request (including refused ones), in order. */
  readonly runs: RunContainerRequest[] = [];
  /** The containers the agent knows, stopped ones until removed; tests may change them. */
  readonly containers = new Map<string, ContainerStatus>();
  readonly logs = new Map<string, LogEntry[]>();
  readonly execs: FakeExec[] = [];
  images: ImageSummary[] = [sampleImage];
  /** Archives put with putCode, by sha256 as given (not checked: the real CodeStore does that). */
  readonly code = new Map<string, Buffer>();
  readonly policies: [string, EgressPolicy][] = [];
  readonly commits: [string, string][] = [];
  readonly restores: [string, RunContainerRequest][] = [];
  /** Errors for the next runContainer calls, one each. */
  readonly failRun: Error[] = [];
  /** When set, every call rejects with it. */
  failWith?: unknown;
  /** Methods the code under test must not call: calling one fails the test. */
  readonly refused = new Set<string>();
  /** Holds runContainer calls until it resolves (to keep starts in flight). */
  gate?: Promise<void>;
  /** Runs inside stopContainer, before it answers (e.g. the exit event of the stopped container). */
  onStop?: (id: string) => Promise<void>;
  /** Refuses checkpoints with it, and checkpointSupport says why. */
  checkpointError?: BerthError;
  servesExposePort: boolean;
  /** The signal of the last streamLogs call, to see cancellation arrive. */
  lastLogSignal?: AbortSignal;
  private readonly statusDefaults: Partial<ContainerStatus>;
  private readonly defaultImage: string;
  private readonly now: () => number;
  private readonly followers = new Set<() => void>();
  private readonly ended = new Set<string>();
  private readonly fs = new Map<string, FakeFileTree>();
  /** Sandbox processes: the agent's own table over this fake's exec. */
  override readonly processes = new ProcessTable({
    exec: (id, req) => this.exec(id, req),
    known: (id) => void this.must(id),
    clock: () => this.now(),
  });

  constructor(o: FakeContainerApiOptions = {}) {
    super();
    this.agentId = o.agentId ?? "agent-fake";
    this.gpuUuids = o.gpuUuids ?? [];
    this.scripted = o.scripted ?? false;
    this.statusDefaults = o.statusDefaults ?? {};
    this.defaultImage = o.defaultImage ?? "default";
    this.servesExposePort = o.servesExposePort ?? true;
    this.now = o.now ?? Date.now;
  }

  /** Makes the fake an agent that serves ExposePort. */
  withExposePort(): this {
    this.servesExposePort = true;
    return this;
  }

  count(method: string): number {
    return this.calls.filter((c) => c[0] === method).length;
  }
  /** The arguments of the last call of `method`. */
  lastCall(method: string): unknown[] | undefined {
    return this.calls
      .filter((c) => c[0] === method)
      .at(-1)
      ?.slice(1);
  }
  /** The ids stopContainer was called with, in order. */
  get stops(): string[] {
    return this.calls.filter((c) => c[0] === "stopContainer").map((c) => c[1] as string);
  }

  protected record(method: string, ...args: unknown[]): void {
    this.calls.push([method, ...args]);
    if (this.refused.has(method)) throw new Error(`${method} is not used here`);
    if (this.failWith !== undefined) throw this.failWith;
  }

  private must(id: string): ContainerStatus {
    const s = this.containers.get(id);
    if (!s) throw new BerthError("not_found", `container ${id} not found`, { containerId: id });
    return s;
  }

  private newStatus(req: RunContainerRequest, id: string): ContainerStatus {
    const taken = new Set([...this.containers.values()].flatMap((s) => s.gpus));
    const gpus = this.gpuUuids.filter((u) => !taken.has(u)).slice(0, req.gpu?.count ?? 0);
    const now = this.now();
    return {
      id,
      image: req.image ?? this.defaultImage,
      imageDigest: "sha256:0",
      state: "running",
      pid: 1,
      createdAt: now,
      startedAt: now,
      ...this.statusDefaults,
      labels: { ...req.labels },
      cpu: req.cpu,
      memoryBytes: req.memoryBytes,
      gpus,
      egress: req.egress ?? { mode: "open" },
      exposedPorts: req.exposedPorts ?? [],
    };
  }

  private add(req: RunContainerRequest, fallbackId: string): ContainerStatus {
    const id = req.id ?? fallbackId;
    if (this.containers.has(id)) throw new BerthError("conflict", `container ${id} already exists`);
    const s = this.newStatus(req, id);
    this.containers.set(id, s);
    const script = this.scripted ? parseScript(req.args) : undefined;
    if (script) {
      const alive = () => this.containers.get(id) === s && s.state === "running";
      void play(script, (stream, line) => this.appendLog(id, stream, line), alive).then((code) => {
        if (code !== undefined) this.exit(id, code);
      });
    }
    return s;
  }

  async runContainer(req: RunContainerRequest): Promise<ContainerStatus> {
    this.runs.push(req);
    this.record("runContainer", req);
    await this.gate;
    const err = this.failRun.shift();
    if (err) throw err;
    return this.add(req, `ctr-${this.containers.size + 1}`);
  }

  /** The container ends as the runtime would report it: stopped, with this code and reason; its logs end. */
  exit(id: string, exitCode: number, reason: ExitReason = "exited"): ContainerStatus {
    const s = this.must(id);
    if (s.state !== "stopped") {
      Object.assign(s, { state: "stopped", exitCode, reason, exitedAt: this.now() });
      for (const e of this.execs) if (!e.finished && this.execOwner.get(e) === id) e.finish(137);
    }
    this.endLogs(id);
    return s;
  }

  async stopContainer(id: string, opts?: { graceMs?: number; remove?: boolean }): Promise<ContainerStatus> {
    this.record("stopContainer", id, opts);
    await this.onStop?.(id);
    const s = this.must(id);
    if (s.state !== "stopped") this.exit(id, opts?.graceMs === 0 ? 137 : 143, "killed");
    if (opts?.remove) {
      this.processes.drop(id);
      this.containers.delete(id);
      this.fs.delete(id);
    }
    return { ...s, state: "stopped" };
  }

  async getContainer(id: string): Promise<ContainerStatus> {
    this.record("getContainer", id);
    return this.must(id);
  }

  async listContainers(filter?: { labels?: Record<string, string> }): Promise<ContainerStatus[]> {
    this.record("listContainers", filter);
    const want = Object.entries(filter?.labels ?? {});
    return [...this.containers.values()].filter((s) => want.every(([k, v]) => s.labels[k] === v));
  }

  /** Adds a log line and wakes followers. */
  appendLog(id: string, stream: "stdout" | "stderr", line: string): void {
    const list = this.logs.get(id) ?? [];
    list.push({ containerId: id, stream, line, ts: Math.max(this.now(), (list.at(-1)?.ts ?? 0) + 1) });
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
    this.must(id);
    if (opts.tail !== undefined && (!Number.isInteger(opts.tail) || opts.tail < 0))
      throw new BerthError("invalid_request", `tail must be an integer >= 0, got ${opts.tail}`);
    this.lastLogSignal = opts.signal;
    // Past lines as the host's spools give them: the last `tail` per stream, stdout's first.
    const past = [...(this.logs.get(id) ?? [])];
    const tailOf = (stream: string) => {
      const mine = past.filter((e) => e.stream === stream);
      return opts.tail === undefined ? mine : mine.slice(mine.length - Math.min(opts.tail, mine.length));
    };
    yield* opts.tail === undefined ? past : [...tailOf("stdout"), ...tailOf("stderr")];
    let next = past.length;
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

  private readonly execOwner = new WeakMap<FakeExec, string>();

  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    this.record("exec", id, req);
    const s = this.must(id);
    if (s.state !== "running") throw new BerthError("failed_precondition", `container ${id} is not running`);
    const e = new FakeExec(req);
    this.execOwner.set(e, id);
    this.execs.push(e);
    if (this.scripted) playExec(e, () => !e.finished);
    return e;
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

  /** The images; one a container (not yet removed) runs is in use. */
  async listImages(): Promise<ImageSummary[]> {
    this.record("listImages");
    const used = new Set([...this.containers.values()].map((s) => s.image));
    return this.images.map((i) => (!i.inUse && i.refs.some((r) => used.has(r)) ? { ...i, inUse: true } : i));
  }

  async removeImage(ref: string): Promise<void> {
    this.record("removeImage", ref);
    if (!this.images.some((i) => i.refs.includes(ref)))
      throw new BerthError("not_found", `image ${ref} not found`);
    this.images = this.images.filter((i) => !i.refs.includes(ref));
  }

  /** Names the import after req.name, with a digest made from the path; refuses a relative path. */
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
    const s = this.must(id);
    this.policies.push([id, policy]);
    s.egress = policy;
    return s;
  }

  async exposePort(id: string, port: number): Promise<ContainerStatus> {
    this.record("exposePort", id, port);
    if (!this.servesExposePort) {
      throw new BerthError("not_implemented", `agent ${this.agentId}: unknown method ExposePort`);
    }
    const s = this.must(id);
    if (!s.exposedPorts.includes(port)) s.exposedPorts = [...s.exposedPorts, port];
    return s;
  }

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

  // Files: one FakeFileTree per container (test/helpers/fake-files.ts).

  private tree(id: string): FakeFileTree {
    this.must(id);
    let t = this.fs.get(id);
    if (!t) {
      t = new FakeFileTree(this.now);
      this.fs.set(id, t);
    }
    return t;
  }

  async statPath(id: string, path: string): Promise<FileInfo> {
    this.record("statPath", id, path);
    return this.tree(id).stat(path);
  }
  async listDir(id: string, path: string): Promise<FileInfo[]> {
    this.record("listDir", id, path);
    return this.tree(id).list(path);
  }
  async *readFile(id: string, path: string): AsyncIterable<Uint8Array> {
    this.record("readFile", id, path);
    yield* this.tree(id).read(path);
  }
  async writeFile(
    id: string,
    path: string,
    data: AsyncIterable<Uint8Array>,
    opts?: { mode?: number },
  ): Promise<FileInfo> {
    this.record("writeFile", id, path, opts);
    const tree = this.tree(id);
    const chunks: Buffer[] = [];
    tree.checkWritable(path);
    for await (const c of data) chunks.push(Buffer.from(c));
    return tree.write(path, Buffer.concat(chunks), opts?.mode);
  }
  async deleteFile(id: string, path: string): Promise<void> {
    this.record("deleteFile", id, path);
    this.tree(id).deleteFile(path);
  }
  async createDirectory(id: string, path: string): Promise<FileInfo> {
    this.record("createDirectory", id, path);
    return this.tree(id).mkdir(path);
  }
  async deleteDirectory(id: string, path: string): Promise<void> {
    this.record("deleteDirectory", id, path);
    this.tree(id).rmdir(path);
  }
  async findInFiles(id: string, path: string, pattern: string): Promise<FileSearchMatch[]> {
    this.record("findInFiles", id, path, pattern);
    return this.tree(id).find(path, pattern);
  }
  async replaceInFiles(
    id: string,
    path: string,
    oldString: string,
    newString: string,
  ): Promise<ReplaceResult[]> {
    this.record("replaceInFiles", id, path, oldString, newString);
    return this.tree(id).replace(path, oldString, newString);
  }

  // Snapshots

  async commitFilesystem(id: string, ref: string): Promise<ImageSummary> {
    this.record("commitFilesystem", id, ref);
    this.must(id);
    this.commits.push([id, ref]);
    const image = { ref, refs: [ref], digest: "sha256:1", sizeBytes: 42, pulledAt: "", inUse: false };
    this.images = [...this.images.filter((i) => !i.refs.includes(ref)), image];
    return image;
  }
  async checkpointSupport(): Promise<{ supported: boolean; reason?: string }> {
    this.record("checkpointSupport");
    return this.checkpointError
      ? { supported: false, reason: this.checkpointError.message }
      : { supported: true };
  }
  async checkpointMemory(id: string, snapshotId: string): Promise<{ snapshotId: string; sizeBytes: number }> {
    this.record("checkpointMemory", id, snapshotId);
    this.must(id);
    if (this.checkpointError) throw this.checkpointError;
    return { snapshotId, sizeBytes: 7 };
  }
  async restoreMemory(snapshotId: string, req: RunContainerRequest): Promise<ContainerStatus> {
    this.record("restoreMemory", snapshotId, req);
    this.restores.push([snapshotId, req]);
    return this.add(req, `ctr-r${this.restores.length}`);
  }
}

/**
 * The fake the transport and edge CLI tests serve over gRPC: scripted, new
 * statuses filled in as sampleStatus fills them, "berth-default" the image of
 * a run that names none.
 */
export function transportFake(): FakeContainerApi {
  return new FakeContainerApi({
    scripted: true,
    statusDefaults: SAMPLE_STATUS_DEFAULTS,
    defaultImage: "berth-default",
  });
}
