// Fakes for the sandbox service's logic tests: an agent keeping containers,
// files and snapshots in memory, exec sessions the test drives, and a world
// with a real SQLite store, a real FleetView and a clock the test moves.

import pino from "pino";
import type {
  ContainerStatus,
  ExecOutput,
  ExecRequest,
  ExecSession,
  ImageSummary,
  RunContainerRequest,
} from "../../api/index.ts";
import type { FileInfo } from "../../api/index.ts";
import type { EgressPolicy } from "../../shared/egress.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { SandboxService } from "../../coordinator/sandboxes/service.ts";
import type { SandboxAgentApi, SandboxServiceOptions } from "../../coordinator/sandboxes/types.ts";
import { Store } from "../../coordinator/store/store.ts";
import type { StubRecord } from "../../coordinator/store/stubs.ts";
import { BerthError } from "../../shared/errors.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import type { StubExtra } from "../../shared/tasks.ts";
import { capacity, UnusedAgentCalls } from "../containers/fakes.ts";
import { tempDir } from "../helpers/env.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

/** An exec the test drives: it writes output, reads what came on stdin, ends it. */
export class FakeExec implements ExecSession {
  readonly stdin: Buffer[] = [];
  stdinClosed = false;
  readonly signals: string[] = [];
  readonly exit: Promise<number>;
  private settle!: (code: number) => void;
  private queue: ExecOutput[] = [];
  private ended = false;
  private wake?: () => void;

  constructor(readonly req: ExecRequest) {
    this.exit = new Promise((r) => {
      this.settle = r;
    });
  }

  write(stream: "stdout" | "stderr", text: string): void {
    this.queue.push({ stream, data: Buffer.from(text) });
    this.wake?.();
  }
  finish(code: number): void {
    if (this.ended) return;
    this.ended = true;
    this.settle(code);
    this.wake?.();
  }
  writeStdin(data: Uint8Array): void {
    this.stdin.push(Buffer.from(data));
  }
  closeStdin(): void {
    this.stdinClosed = true;
  }
  kill(signal: NodeJS.Signals = "SIGTERM"): void {
    this.signals.push(signal);
    this.finish(128 + (signal === "SIGKILL" ? 9 : 15));
  }
  get output(): AsyncIterable<ExecOutput> {
    const self = this;
    return {
      async *[Symbol.asyncIterator]() {
        for (;;) {
          const next = self.queue.shift();
          if (next) {
            yield next;
            continue;
          }
          if (self.ended) return;
          await new Promise<void>((r) => {
            self.wake = r;
          });
        }
      },
    };
  }
}

function status(req: RunContainerRequest, id: string): ContainerStatus {
  return {
    id,
    image: req.image ?? "default",
    imageDigest: "sha256:0",
    state: "running",
    pid: 1,
    createdAt: Date.now(),
    startedAt: Date.now(),
    labels: req.labels ?? {},
    cpu: req.cpu,
    memoryBytes: req.memoryBytes,
    gpus: [],
    egress: req.egress ?? { mode: "open" },
    exposedPorts: req.exposedPorts ?? [],
  };
}

const notFound = (id: string) => new BerthError("not_found", `container ${id} not found`);

/** One agent in memory. Unused methods throw. */
export class FakeSandboxAgent extends UnusedAgentCalls implements SandboxAgentApi {
  readonly containers = new Map<string, ContainerStatus>();
  readonly runs: RunContainerRequest[] = [];
  readonly execs: FakeExec[] = [];
  readonly files = new Map<string, Buffer>();
  readonly policies: [string, EgressPolicy][] = [];
  readonly stops: string[] = [];
  readonly commits: [string, string][] = [];
  readonly restores: [string, RunContainerRequest][] = [];
  failRun?: Error;
  checkpointError?: BerthError;
  /** False: answers ExposePort as an agent from before that call (gRPC UNIMPLEMENTED) does. */
  servesExposePort = false;

  constructor(readonly agentId: string) {
    super();
  }

  /** Makes the fake an agent that serves ExposePort. */
  withExposePort(): this {
    this.servesExposePort = true;
    return this;
  }

  async exposePort(id: string, port: number): Promise<ContainerStatus> {
    if (!this.servesExposePort) {
      throw new BerthError("not_implemented", `agent ${this.agentId}: unknown method ExposePort`);
    }
    const c = this.must(id);
    if (!c.exposedPorts.includes(port)) c.exposedPorts = [...c.exposedPorts, port];
    return c;
  }

  private must(id: string): ContainerStatus {
    const c = this.containers.get(id);
    if (!c) throw notFound(id);
    return c;
  }

  async runContainer(req: RunContainerRequest): Promise<ContainerStatus> {
    this.runs.push(req);
    if (this.failRun) throw this.failRun;
    const s = status(req, req.id ?? "ctr-x");
    this.containers.set(s.id, s);
    return s;
  }
  /** Runs inside stopContainer, before it answers (e.g. the exit event of the stopped container). */
  onStop?: (id: string) => Promise<void>;

  async stopContainer(id: string, opts?: { graceMs?: number; remove?: boolean }): Promise<ContainerStatus> {
    this.stops.push(id);
    await this.onStop?.(id);
    const c = this.must(id);
    if (opts?.remove) this.containers.delete(id);
    else c.state = "stopped";
    return { ...c, state: "stopped" };
  }
  async getContainer(id: string): Promise<ContainerStatus> {
    return this.must(id);
  }
  async listContainers(filter?: { labels?: Record<string, string> }): Promise<ContainerStatus[]> {
    return [...this.containers.values()].filter((s) =>
      Object.entries(filter?.labels ?? {}).every(([k, v]) => s.labels[k] === v),
    );
  }
  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    this.must(id);
    const e = new FakeExec(req);
    this.execs.push(e);
    return e;
  }
  async setNetworkPolicy(id: string, policy: EgressPolicy): Promise<ContainerStatus> {
    const c = this.must(id);
    this.policies.push([id, policy]);
    c.egress = policy;
    return c;
  }
  async hasCode(): Promise<boolean> {
    return true;
  }
  async putCode(): Promise<void> {}

  // files: a flat map of container path → bytes, enough for pass-through tests
  private info(path: string, size: number): FileInfo {
    return {
      name: path.split("/").pop() ?? "",
      path,
      size,
      isDir: false,
      isSymlink: false,
      modTime: Date.UTC(2030, 0, 1),
      mode: 0o644,
      permissions: "-rw-r--r--",
      uid: 0,
      gid: 0,
      owner: "root",
      group: "root",
    };
  }
  private file(id: string, path: string): Buffer {
    this.must(id);
    const b = this.files.get(`${id}:${path}`);
    if (!b) throw new BerthError("path_not_found", `no file or directory at ${path}`, { path });
    return b;
  }
  async statPath(id: string, path: string): Promise<FileInfo> {
    return this.info(path, this.file(id, path).length);
  }
  async listDir(id: string, path: string): Promise<FileInfo[]> {
    this.must(id);
    const prefix = `${id}:${path.replace(/\/$/, "")}/`;
    return [...this.files]
      .filter(([k]) => k.startsWith(prefix))
      .map(([k, b]) => this.info(k.slice(id.length + 1), b.length));
  }
  async *readFile(id: string, path: string): AsyncIterable<Uint8Array> {
    const b = this.file(id, path);
    yield b.subarray(0, 1);
    yield b.subarray(1);
  }
  async writeFile(id: string, path: string, data: AsyncIterable<Uint8Array>): Promise<FileInfo> {
    this.must(id);
    const chunks: Buffer[] = [];
    for await (const c of data) chunks.push(Buffer.from(c));
    const b = Buffer.concat(chunks);
    this.files.set(`${id}:${path}`, b);
    return this.info(path, b.length);
  }
  async deleteFile(id: string, path: string): Promise<void> {
    this.file(id, path);
    this.files.delete(`${id}:${path}`);
  }
  async createDirectory(id: string, path: string): Promise<FileInfo> {
    this.must(id);
    return { ...this.info(path, 0), isDir: true, permissions: "drwxr-xr-x", mode: 0o755 };
  }
  async deleteDirectory(id: string, path: string): Promise<void> {
    this.must(id);
    if (path === "/") throw new BerthError("path_invalid", "cannot delete the root directory /", { path });
  }
  async findInFiles(): Promise<never[]> {
    return [];
  }
  async replaceInFiles(): Promise<never[]> {
    return [];
  }

  // snapshots
  async commitFilesystem(id: string, ref: string): Promise<ImageSummary> {
    this.must(id);
    this.commits.push([id, ref]);
    return { ref, refs: [ref], digest: "sha256:1", sizeBytes: 42, pulledAt: "", inUse: false };
  }
  async checkpointSupport() {
    return this.checkpointError
      ? { supported: false, reason: this.checkpointError.message }
      : { supported: true };
  }
  async checkpointMemory(id: string, snapshotId: string) {
    this.must(id);
    if (this.checkpointError) throw this.checkpointError;
    return { snapshotId, sizeBytes: 7 };
  }
  async restoreMemory(snapshotId: string, req: RunContainerRequest): Promise<ContainerStatus> {
    this.restores.push([snapshotId, req]);
    const s = status(req, req.id ?? "ctr-r");
    this.containers.set(s.id, s);
    return s;
  }
}

export interface SandboxWorld {
  store: Store;
  svc: SandboxService;
  fleet: FleetView;
  agents: Map<string, FakeSandboxAgent>;
  clock: { now: number };
  ws: string;
  otherWs: string;
  emit(e: Omit<ContainerEventMessage, "at">): void;
  addAgent(id: string, cores?: number): FakeSandboxAgent;
  stub(
    name: string,
    type: string,
    extra?: Partial<StubExtra> & { env?: Record<string, string> },
  ): Promise<StubRecord>;
}

/** A sandbox service over a real SQLite store and fake agents. */
export async function sandboxWorld(
  t: { after: (fn: () => unknown) => void },
  over: Partial<SandboxServiceOptions> = {},
): Promise<SandboxWorld> {
  const store = await Store.open(`sqlite:${tempDir(t)}/berth.db`);
  const clock = { now: Date.UTC(2030, 0, 1) };
  const fleet = new FleetView({ minLostAfterMs: 3_600_000 });
  const agents = new Map<string, FakeSandboxAgent>();
  let handler: ((e: ContainerEventMessage) => void) | undefined;
  const svc = new SandboxService({
    repo: store.sandboxes,
    stubs: store.stubs,
    fleet,
    agents: {
      client: (id) => {
        const a = agents.get(id);
        if (!a) throw new BerthError("unavailable", `no agent ${id}`);
        return a;
      },
    },
    code: {
      open: () => {
        throw new Error("no code in these tests");
      },
    },
    events: {
      subscribe: (h) => {
        handler = h;
        return () => {
          handler = undefined;
        };
      },
    },
    publicUrl: "https://berth.example/",
    log: pino({ level: "silent" }),
    clock: () => clock.now,
    sweepIntervalMs: 3_600_000,
    touchEveryMs: 1,
    stopGraceMs: 0,
    // Refuse at once when full, unless a test asks for the wait.
    placementWaitMs: 0,
    ...over,
  });
  svc.open();
  const ws = (await store.workspaces.create("sb-main")).id;
  const otherWs = (await store.workspaces.create("sb-other")).id;
  t.after(async () => {
    await svc.close();
    await store.close();
  });
  return {
    store,
    svc,
    fleet,
    agents,
    clock,
    ws,
    otherWs,
    emit: (e) => handler?.({ at: clock.now, ...e }),
    addAgent(id, cores = 4) {
      const a = new FakeSandboxAgent(id);
      agents.set(id, a);
      fleet.observe(
        {
          agentId: id,
          hostname: id,
          version: "t",
          sentAt: Date.now(),
          intervalMs: 600_000,
          grpcAddress: "127.0.0.1:1",
          capacity: capacity(cores, 8),
        },
        Date.now(),
      );
      return a;
    },
    async stub(name, type, extra = {}) {
      return (
        await store.stubs.upsert(ws, {
          name,
          type,
          config: stubConfig({ handler: "" }),
          extra: stubExtra(extra),
          objectId: null,
        })
      ).stub;
    },
  };
}
