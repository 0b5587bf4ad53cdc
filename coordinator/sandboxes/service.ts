// Sandboxes and pods on the coordinator (docs/sandboxes.md): one container
// per create, placed through the planner and started on the chosen agent
// (starter.ts);
// its record in the store; processes (kept by that agent, so any coordinator
// answers for them), files, ports, egress and snapshots through that agent;
// the TTL and container exits end it (upkeep.ts).

import type { WorkspaceUsage } from "../scheduler/index.ts";
import type {
  ContainerFilesApi,
  ExecRequest,
  OutputStream,
  ProcessInfo,
  ProcessOutput,
  ProcessRunEvent,
} from "../../api/index.ts";
import { type EgressRequest, egressPolicyToRequest, resolveEgressPolicy } from "../../shared/egress.ts";
import { BerthError, invalid } from "../../shared/errors.ts";
import { hasKind, newId } from "../../shared/ids.ts";
import type { StubRecord } from "../containers/index.ts";
import { portUrl, portUrls } from "../ports/index.ts";
import type { Reservation } from "../scheduler/index.ts";
import type { SandboxKind, SandboxRecord } from "./store.ts";
import { checkPorts, checkTtl, sandboxKindOf, stubEgress, stubTtl, terminatedError } from "./request.ts";
import {
  type ResolvedSandboxServiceOptions,
  type SandboxAgentApi,
  type SandboxServiceOptions,
  type SandboxContainerInfo,
  type SandboxView,
  resolveSandboxServiceOptions,
} from "./types.ts";
import { type StartPlan, SandboxStarter } from "./starter.ts";
import { SANDBOX_KINDS, SandboxUpkeep } from "./upkeep.ts";

const iso = (ms: number) => new Date(ms).toISOString();

export class SandboxService {
  private readonly o: ResolvedSandboxServiceOptions;
  /** Containers whose start is in flight here (upkeep leaves them alone). */
  private readonly starting = new Set<string>();
  private readonly upkeep: SandboxUpkeep;
  private readonly starter: SandboxStarter;

  constructor(options: SandboxServiceOptions) {
    this.o = resolveSandboxServiceOptions(options);
    this.upkeep = new SandboxUpkeep({
      o: this.o,
      starting: this.starting,
      end: (s, reason) => this.end(s, reason),
    });
    this.starter = new SandboxStarter(this.o, this.starting, this.upkeep);
  }

  /** Starts the TTL sweep, the reconciling of agents' sandbox containers and the exit events. */
  open(): void {
    this.upkeep.start();
  }

  async close(): Promise<void> {
    await this.upkeep.stop();
  }

  /** One sweep now (tests; the timer does the same). */
  sweep(): Promise<void> {
    return this.upkeep.sweep();
  }

  /** What the workspace holds now, every kind of container counted (the planner's usage). */
  usage(workspaceId: string): WorkspaceUsage {
    return this.o.planner.usage(workspaceId);
  }

  /** What sandbox and pod containers hold on agents (their reservations in the planner). */
  reservations(): Reservation[] {
    return this.o.planner.list(SANDBOX_KINDS);
  }

  /**
   * Activity on a sandbox from outside the gateway (a request through one of
   * its port URLs): its TTL starts again. Cheap; any container id may be given.
   */
  touch(containerId: string): void {
    this.upkeep.touch(containerId);
  }

  // ---- lifecycle ----

  /** Starts the stub's container and answers once it runs. `expect` refuses the other kind. */
  async create(
    workspaceId: string,
    stubId: string,
    opts: { expect?: SandboxKind; entrypoint?: string[]; tokenId?: string | null } = {},
  ): Promise<SandboxView> {
    const stub = await this.stubOf(workspaceId, stubId);
    const kind = sandboxKindOf(stub);
    if (opts.expect && kind !== opts.expect)
      throw invalid(
        `stub ${stub.id} is a ${kind} stub; ${opts.expect === "pod" ? "POST /api/v1/gateway/sandboxes" : "POST /api/v1/gateway/pods"} starts it`,
        { stub_id: stub.id, type: stub.type },
      );
    // This starts one container; a gang of hosts is started by the container manager (a deployed pod).
    const nodes = stub.extra.nodes ?? 1;
    if (nodes > 1)
      throw invalid(
        `stub ${stub.id} asks for a gang of ${nodes} hosts (nodes=${nodes}): deploy it; ${opts.expect === "pod" ? "POST /api/v1/gateway/pods" : "this route"} starts one container`,
        { stub_id: stub.id, field: "extra.nodes" },
      );
    let image: string | undefined = stub.extra.image_ref || undefined;
    let imageId: string | null = null;
    let agentId: string | undefined;
    if (image && hasKind(image, "img")) {
      const rec = await this.o.repo.findImage(workspaceId, image);
      if (!rec) throw new BerthError("not_found", `image ${image} not found`, { image_id: image });
      imageId = rec.id;
      image = rec.imageRef;
      agentId = rec.agentId;
    }
    return this.start({
      stub,
      kind,
      egress: stubEgress(stub),
      ports: checkPorts(stub.extra.ports),
      ttlSeconds: stubTtl(stub, kind, this.o.defaultTtlSeconds),
      ...(agentId ? { agentId } : {}),
      ...(image ? { image } : {}),
      imageId,
      ...(opts.entrypoint ? { entrypoint: opts.entrypoint } : {}),
      tokenId: opts.tokenId ?? null,
      run: (api, req) => api.runContainer(req),
    });
  }

  /** A new sandbox restored from a memory snapshot, on the agent holding it. */
  async createFromMemorySnapshot(
    workspaceId: string,
    snapshotId: string,
    tokenId: string | null = null,
  ): Promise<SandboxView> {
    const snap = await this.o.repo.findSnapshot(workspaceId, snapshotId);
    if (!snap)
      throw new BerthError("not_found", `snapshot ${snapshotId} not found`, { snapshot_id: snapshotId });
    const stub = await this.stubOf(workspaceId, snap.stubId);
    return this.start({
      stub,
      kind: "sandbox",
      egress: snap.egress,
      ports: snap.ports,
      ttlSeconds: stubTtl(stub, "sandbox", this.o.defaultTtlSeconds),
      agentId: snap.agentId,
      imageId: null,
      tokenId,
      run: (api, req) => api.restoreMemory(snap.id, req),
    });
  }

  /** The workspace's sandboxes and pods that are not terminated, as the container list shows them. */
  async liveContainers(workspaceId: string): Promise<SandboxContainerInfo[]> {
    const live = (await this.o.repo.list(workspaceId)).filter((s) => s.status !== "terminated");
    return live.map((s) => ({
      id: s.id,
      stubId: s.stubId,
      workspaceId: s.workspaceId,
      agentId: s.agentId,
      state: s.status === "running" ? "running" : "starting",
      since: Date.parse(s.createdAt),
      kind: s.kind,
    }));
  }

  /** Any sandbox of the workspace, terminated ones included. */
  async get(workspaceId: string, id: string): Promise<SandboxView> {
    const s = await this.recordOf(workspaceId, id);
    if (s.status !== "terminated") this.touch(id);
    return this.view(s);
  }

  /** Stops and removes the container; a second call is sandbox_terminated. */
  async terminate(workspaceId: string, id: string): Promise<true> {
    const s = await this.recordOf(workspaceId, id);
    if (s.status === "terminated") throw terminatedError(id, s.terminatedReason);
    if (!(await this.end(s, "terminated by request"))) throw terminatedError(id);
    return true;
  }

  async setTtl(workspaceId: string, id: string, ttlSeconds: number): Promise<string | null> {
    checkTtl(ttlSeconds);
    const s = await this.live(workspaceId, id);
    return this.o.repo.setTtl(s.id, ttlSeconds, iso(this.o.clock()));
  }

  /** Applies a new egress policy at once (the agent's nftables rules); bad input is refused first. */
  async updateNetwork(workspaceId: string, id: string, req: EgressRequest) {
    const policy = resolveEgressPolicy(req);
    return this.onAgent(workspaceId, id, async (api, s) => {
      await api.setNetworkPolicy(s.id, policy);
      await this.o.repo.setEgress(s.id, policy);
      return egressPolicyToRequest(policy);
    });
  }

  async exposePort(workspaceId: string, id: string, port: number): Promise<{ port: number; url: string }> {
    checkPorts([port]);
    return this.onAgent(workspaceId, id, async (api, s) => {
      if (!s.ports.includes(port)) {
        try {
          await api.exposePort(s.id, port);
        } catch (e) {
          // An agent from before ExposePort answers UNIMPLEMENTED: say what still works.
          if (!(e instanceof BerthError) || e.code !== "not_implemented") throw e;
          throw new BerthError(
            "failed_precondition",
            `port ${port} was not exposed when sandbox ${s.id} was created (ports=[${s.ports.join(", ")}]), and its agent ${s.agentId} cannot open a port of a running container; pass it in ports=[...] at creation`,
            { port },
          );
        }
        const now = (await this.o.repo.get(s.id))?.ports ?? s.ports;
        await this.o.repo.setPorts(s.id, [...new Set([...now, port])]);
      }
      return { port, url: this.portUrl(s.id, port) };
    });
  }

  async urls(workspaceId: string, id: string): Promise<Record<string, string>> {
    const s = await this.live(workspaceId, id);
    return portUrls(this.o.publicUrl, this.o.endpointDomain, s.id, s.ports);
  }

  // ---- processes ----

  // The sandbox's agent keeps them (agent/sandboxes/processes.ts): every call asks it.

  async exec(workspaceId: string, id: string, req: ExecRequest): Promise<ProcessInfo> {
    if (req.args.length === 0 || req.args[0] === "") throw invalid("args must name a program to run");
    return this.onAgent(workspaceId, id, (api, s) => api.startProcess(s.id, req));
  }

  /**
   * exec, its output and its exit in one call to the agent (RunProcess): the
   * process has started when this resolves (a refusal is an ordinary error);
   * `events` brings its output and then its end. Returning `events` early
   * stops the stream, not the process.
   */
  async run(
    workspaceId: string,
    id: string,
    req: ExecRequest,
    signal: AbortSignal,
  ): Promise<{ started: ProcessInfo; events: AsyncIterator<ProcessRunEvent> }> {
    if (req.args.length === 0 || req.args[0] === "") throw invalid("args must name a program to run");
    return this.onAgent(workspaceId, id, async (api, s) => {
      if (!api.runProcess) {
        throw new BerthError("not_implemented", `agent ${s.agentId} cannot run a process in one call`);
      }
      const events = api.runProcess(s.id, req, { signal })[Symbol.asyncIterator]();
      const first = await events.next();
      if (first.done || first.value.type !== "started") {
        await events.return?.();
        throw new BerthError("internal", `agent ${s.agentId} answered RunProcess without starting a process`);
      }
      return { started: first.value.process, events };
    });
  }

  /** process_not_found for a pid the sandbox's agent does not know. */
  async process(workspaceId: string, id: string, pid: number): Promise<ProcessInfo> {
    return this.onProcess(workspaceId, id, pid, (api, cid) => api.getProcess(cid, pid));
  }

  async listProcesses(workspaceId: string, id: string): Promise<ProcessInfo[]> {
    return this.onAgent(workspaceId, id, (api, s) => api.listProcesses(s.id));
  }

  /** Writes each chunk to the process's stdin, then (eof) closes it; the bytes written. */
  async writeStdin(
    workspaceId: string,
    id: string,
    pid: number,
    data: AsyncIterable<Uint8Array>,
    eof: boolean,
  ): Promise<number> {
    return this.onProcess(workspaceId, id, pid, async (api, cid) => {
      await api.getProcess(cid, pid);
      let written = 0;
      for await (const chunk of data) {
        await api.writeProcessStdin(cid, pid, chunk);
        written += chunk.length;
      }
      if (eof) await api.writeProcessStdin(cid, pid, new Uint8Array(0), { eof: true });
      return written;
    });
  }

  async kill(workspaceId: string, id: string, pid: number, signal: NodeJS.Signals): Promise<void> {
    return this.onProcess(workspaceId, id, pid, (api, cid) => api.killProcess(cid, pid, signal));
  }

  /** The status once the process ends, or after timeoutMs (or `signal`) while it still runs. */
  async wait(
    workspaceId: string,
    id: string,
    pid: number,
    opts: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<ProcessInfo> {
    return this.onProcess(workspaceId, id, pid, (api, cid) => api.waitProcess(cid, pid, opts));
  }

  async readOutput(
    workspaceId: string,
    id: string,
    pid: number,
    stream: OutputStream,
    offset: number,
  ): Promise<ProcessOutput> {
    const at = Math.min(offset, Number.MAX_SAFE_INTEGER);
    return this.onProcess(workspaceId, id, pid, (api, cid) => api.readProcessOutput(cid, pid, stream, at));
  }

  /**
   * The output from `offset` followed live: `start` (the first offset kept)
   * is known before any byte comes, and a missing process fails here rather
   * than in the stream.
   */
  async followOutput(
    workspaceId: string,
    id: string,
    pid: number,
    stream: OutputStream,
    offset: number,
    signal: AbortSignal,
  ): Promise<{ start: number; chunks: AsyncIterable<Uint8Array> }> {
    // Offsets past what a process can write read as its end (and stay exact on the wire).
    const at = Math.min(offset, Number.MAX_SAFE_INTEGER);
    return this.onProcess(workspaceId, id, pid, async (api, cid) => {
      // A read past the end answers no bytes, only where the kept output starts.
      const { start } = await api.readProcessOutput(cid, pid, stream, Number.MAX_SAFE_INTEGER);
      return { start, chunks: api.followProcessOutput(cid, pid, stream, at, { signal }) };
    });
  }

  /** A call on one process; a pid no agent can have (past uint32, the wire's) is process_not_found here. */
  private onProcess<T>(
    workspaceId: string,
    id: string,
    pid: number,
    fn: (api: SandboxAgentApi, containerId: string) => Promise<T>,
  ): Promise<T> {
    return this.onAgent(workspaceId, id, (api, s) => {
      if (!Number.isInteger(pid) || pid < 1 || pid > 0xffff_ffff)
        throw new BerthError("process_not_found", `sandbox ${s.id} has no process ${pid}`, {
          sandbox_id: s.id,
          pid,
        });
      return fn(api, s.id);
    });
  }

  // ---- files ----

  /**
   * A file call on the sandbox's container. Failures come from the agent as
   * they are (path_not_found, path_invalid naming the path), except that a
   * container the agent no longer has ends the sandbox (sandbox_terminated).
   */
  async withFiles<T>(
    workspaceId: string,
    id: string,
    fn: (api: ContainerFilesApi, containerId: string) => Promise<T>,
  ): Promise<T> {
    return this.onAgent(workspaceId, id, (api, s) => fn(api, s.id));
  }

  // ---- snapshots ----

  async snapshotFilesystem(workspaceId: string, id: string): Promise<string> {
    return this.onAgent(workspaceId, id, async (api, s) => {
      const imageId = newId("img");
      const img = await api.commitFilesystem(s.id, `berth-snapshots/${imageId}:latest`);
      await this.o.repo.insertImage({
        id: imageId,
        workspaceId,
        agentId: s.agentId,
        imageRef: img.ref,
        sourceSandboxId: s.id,
        sizeBytes: img.sizeBytes,
        createdAt: iso(this.o.clock()),
      });
      return imageId;
    });
  }

  /** checkpoint_unavailable (with CRIU's output) where the host cannot checkpoint. */
  async snapshotMemory(workspaceId: string, id: string): Promise<string> {
    return this.onAgent(workspaceId, id, async (api, s) => {
      const snapshotId = newId("snap");
      const r = await api.checkpointMemory(s.id, snapshotId);
      await this.o.repo.insertSnapshot({
        id: snapshotId,
        workspaceId,
        agentId: s.agentId,
        sourceSandboxId: s.id,
        stubId: s.stubId,
        ports: s.ports,
        egress: s.egress,
        sizeBytes: r.sizeBytes,
        createdAt: iso(this.o.clock()),
      });
      return snapshotId;
    });
  }

  // ---- internals ----

  private async start(p: StartPlan): Promise<SandboxView> {
    return this.view(await this.starter.start(p));
  }

  /**
   * Ends a sandbox: its container (the agent ends its processes with it), its room; true when this
   * call marked it terminated. The record is marked first, so the exit event of the container stopped
   * here reads as an end already recorded (not a second, racing one); a stop
   * that fails is retried by the sweep, which removes terminated sandboxes'
   * containers.
   */
  private async end(s: SandboxRecord, reason: string): Promise<boolean> {
    const ended = await this.o.repo.markTerminated(s.id, iso(this.o.clock()), reason);
    await this.upkeep.removeOnAgent(s.agentId, s.id, this.o.stopGraceMs);
    this.o.planner.release(s.id);
    if (ended)
      this.o.log.info({ sandboxId: s.id, agentId: s.agentId, reason }, `${s.kind} terminated: ${reason}`);
    return ended;
  }

  private async stubOf(workspaceId: string, stubId: string): Promise<StubRecord> {
    const stub = await this.o.stubs.get(stubId);
    if (!stub || stub.workspaceId !== workspaceId)
      throw new BerthError("not_found", `stub ${stubId} not found`);
    return stub;
  }

  /** The workspace's record; not_found for an unknown id or another workspace's. */
  private async recordOf(workspaceId: string, id: string): Promise<SandboxRecord> {
    const s = await this.o.repo.find(workspaceId, id);
    if (!s) throw new BerthError("not_found", `sandbox ${id} not found`, { sandbox_id: id });
    return s;
  }

  /** A running sandbox of the workspace (the call counts as activity); sandbox_terminated once it ended. */
  private async live(workspaceId: string, id: string): Promise<SandboxRecord> {
    const s = await this.recordOf(workspaceId, id);
    if (s.status === "terminated") throw terminatedError(id, s.terminatedReason);
    this.touch(id);
    return s;
  }

  /** A call on the sandbox's agent; a container the agent no longer has ends the sandbox. */
  private async onAgent<T>(
    workspaceId: string,
    id: string,
    fn: (api: SandboxAgentApi, s: SandboxRecord) => Promise<T>,
  ): Promise<T> {
    const s = await this.live(workspaceId, id);
    try {
      return await fn(this.o.agents.client(s.agentId), s);
    } catch (e) {
      if (e instanceof BerthError && e.code === "not_found" && this.starting.has(s.id) === false) {
        const still = await this.o.repo.get(s.id);
        if (still && still.status !== "terminated" && (await this.upkeep.containerGone(s))) {
          await this.end(s, `its container is gone from agent ${s.agentId}`);
          throw terminatedError(s.id, "its container is gone");
        }
      }
      throw e;
    }
  }

  private portUrl(id: string, port: number): string {
    return portUrl(this.o.publicUrl, this.o.endpointDomain, id, port);
  }

  view(s: SandboxRecord): SandboxView {
    return {
      sandboxId: s.id,
      stubId: s.stubId,
      kind: s.kind,
      agentId: s.agentId,
      status: s.status,
      createdAt: s.createdAt,
      expiresAt: s.expiresAt,
      ttlSeconds: s.ttlSeconds,
      ports: [...s.ports],
      urls: portUrls(this.o.publicUrl, this.o.endpointDomain, s.id, s.ports),
      network: egressPolicyToRequest(s.egress),
      terminatedAt: s.terminatedAt,
      terminatedReason: s.terminatedReason,
      exitCode: s.exitCode,
    };
  }
}
