// The agent's local ContainerApi: composes the image store, the network,
// GPU assignment and the runtime into "run this container", and undoes every
// step when a later one fails. See docs/agent-host.md.

import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { type EgressPolicy, validateEgressPolicy } from "../../shared/egress.ts";
import { BerthError, describeError, notFound } from "../../shared/errors.ts";
import { SingleFlight } from "../single-flight.ts";
import { CodeStore } from "../code/store.ts";
import type { ContainerFiles } from "../files/index.ts";
import type {
  ContainerApi,
  ContainerStatus,
  ExecRequest,
  ExecSession,
  ImageSummary,
  LogEntry,
  RunContainerRequest,
} from "../../api/index.ts";
import type { BindMount, ContainerEvent } from "../runtime/index.ts";
import type { ContainerSnapshots } from "../snapshots/index.ts";
import { ImageBuilder, PushingBuilds } from "../build/index.ts";
import { resolveRegistryCredentials } from "../images/index.ts";
import { Allocations, pickGpus } from "./allocations.ts";
import { clearExecScratch, resolveExecRequest, startPipeExec, startTtyExec } from "./exec.ts";
import {
  gcImages,
  imageOpsStore,
  imageSummary,
  importImage,
  type PullImageOptions,
  pullImage,
} from "./image-ops.ts";
import { connectInit, startInitExec } from "./init-exec.ts";
import { streamLogFiles } from "./logs.ts";
import { BucketMounts } from "../volumes/buckets.ts";
import { checkMountSource } from "./mounts.ts";
import {
  type ContainerHostOptions,
  type ResolvedContainerHostOptions,
  resolveContainerHostOptions,
} from "./options.ts";
import { type ProvisionDeps, provisionContainer } from "./provision.ts";
import { type HostRecord, HostRecords, recordStatus } from "./records.ts";
import { resolveRunRequest } from "./request.ts";
import { RunnerBridges } from "./runner.ts";
import {
  containerFilesOf,
  containerSnapshotsOf,
  type RestoringRuntime,
  restoreStep,
  SandboxDelegation,
  type StartStep,
} from "./sandbox.ts";
import { SandboxInits } from "./sandbox-init.ts";
import { WarmRunners } from "./warm-runners.ts";
import { WarmSandboxes } from "./warm-sandboxes.ts";
import { gangRankOf } from "./gang.ts";
import { ProcessTable } from "../sandboxes/processes.ts";

/** Also ContainerFilesApi and ContainerSnapshotApi, through `files` and `snapshots` (see SandboxDelegation). */
export class ContainerHost extends SandboxDelegation implements ContainerApi {
  readonly options: ResolvedContainerHostOptions;
  private readonly runtime: RestoringRuntime;
  private readonly records: HostRecords;
  private readonly byId = new Map<string, HostRecord>();
  private readonly allocations: Allocations;
  /** Ids between reservation and the end of runContainer. */
  private readonly starting = new Set<string>();
  /** Removals under way: another remove of the same container answers with the first's (coordinators may each ask). */
  private readonly removing = new SingleFlight<ContainerStatus>();
  private recovering = false;
  readonly code: CodeStore;
  private readonly bridges: RunnerBridges;
  /** Sockets of sandbox containers' process servers (pid 1); exec uses them before runc exec. */
  private readonly inits: SandboxInits;
  /** Files inside running containers (agent/files). */
  override readonly files: ContainerFiles;
  /** Filesystem commits and memory checkpoints (agent/snapshots). */
  override readonly snapshots: ContainerSnapshots;
  /** Sandbox containers' processes (agent/sandboxes), recorded under <root>/processes for a restart. */
  override readonly processes: ProcessTable;
  private readonly provisioning: ProvisionDeps;
  /** Runner containers started ahead of demand (docs/runtime.md, "Pre-warmed runners"). */
  readonly warm: WarmRunners;
  /** Sandbox containers started ahead of demand (docs/sandboxes.md, "Pre-warmed sandboxes"). */
  readonly warmSandboxes: WarmSandboxes;
  /** s3fs mounts of cloud buckets, per container (agent/volumes/buckets.ts). */
  private readonly buckets: BucketMounts;
  /** Image builds: steps run as this host's containers, committed into its image store (agent/build). */
  readonly builds = new PushingBuilds(
    new ImageBuilder(this, {
      pullDefault: async (onProgress) =>
        imageSummary(await this.options.images.pull(undefined, { onProgress })),
      pullWithCreds: async (ref, vars, onProgress) =>
        imageSummary(
          await this.options.images.pull(ref, {
            credentials: resolveRegistryCredentials(vars, {}),
            onProgress,
          }),
        ),
      micromambaBin: () => this.options.micromambaBin,
    }),
    // Built images go to the cluster registry when the build asks (agent/build/push.ts).
    {
      pushToCluster: (ref, to, o) => {
        const push = this.options.images.pushToCluster?.bind(this.options.images);
        if (!push) throw new BerthError("failed_precondition", "this agent's image store cannot push images");
        return push(ref, to, o);
      },
    },
  );

  private constructor(opts: ContainerHostOptions) {
    super();
    this.options = resolveContainerHostOptions(opts);
    this.records = new HostRecords(this.options.root);
    mkdirSync(this.hostsDir, { recursive: true });
    mkdirSync(this.execDir, { recursive: true });
    this.allocations = new Allocations(this.options.cpuOvercommit);
    this.code = new CodeStore(this.options.codeDir);
    this.bridges = new RunnerBridges(this.options.bridgeDir, this.options.runners);
    this.inits = new SandboxInits(join(this.options.root, "sandbox-init"));
    this.buckets = new BucketMounts({ dir: join(this.options.root, "buckets"), logger: this.options.logger });
    this.runtime = this.options.runtime({
      onEvent: (e) => this.onRuntimeEvent(e),
      onLog: (l) =>
        this.options.onLog({
          containerId: l.containerId,
          stream: l.stream,
          // A build step's secrets never reach the shipped logs (agent/build).
          line: this.builds.inner.redact(l.containerId, l.line),
          ts: l.ts,
        }),
    });
    this.provisioning = {
      options: this.options,
      runtime: this.runtime,
      bridges: this.bridges,
      inits: this.inits,
      buckets: this.buckets,
      hostsDir: this.hostsDir,
      keep: (record) => {
        this.records.write(record);
        this.byId.set(record.id, record);
      },
      forget: (id) => this.forget(id),
      free: (id) => this.allocations.free(id),
    };
    this.warm = new WarmRunners(this.provisioning, this.options.warmRunners);
    this.warmSandboxes = new WarmSandboxes(this.provisioning, this.options.warmSandboxes);
    this.files = containerFilesOf(this.runtime, (id) => void this.mustGet(id));
    this.processes = new ProcessTable({
      exec: (id, req) => this.exec(id, req),
      known: (id) => void this.mustGet(id),
      recordDir: join(this.options.root, "processes"),
    });
    this.snapshots = containerSnapshotsOf(this.runtime, {
      imageDigestOf: (id) => this.mustGet(id).imageDigest,
      images: this.options.images,
      restore: (dir, req) => this.startContainer(req, restoreStep(this.runtime, dir)),
      dir: join(this.options.root, "snapshots"),
    });
  }

  /**
   * Builds the host and adopts what a previous agent left: the runtime
   * recovers its containers, records without a container are dropped, live
   * containers get their image in-use marks, allocations and network leases
   * back, and everything else the network holds is released.
   */
  static async start(opts: ContainerHostOptions): Promise<ContainerHost> {
    const host = new ContainerHost(opts);
    await host.recover();
    host.warm.refill();
    host.warmSandboxes.refill();
    return host;
  }

  private get hostsDir(): string {
    return join(this.options.root, "hosts");
  }

  private get execDir(): string {
    return join(this.options.root, "exec");
  }

  private async recover(): Promise<void> {
    const log = this.options.logger;
    for (const r of this.records.readAll()) this.byId.set(r.id, r);
    clearExecScratch(this.options.root, this.execDir, this.options.logger);
    this.recovering = true;
    try {
      await this.runtime.recover();
    } finally {
      this.recovering = false;
    }
    for (const info of this.runtime.list()) {
      if (this.byId.has(info.id)) continue;
      log.warn({ id: info.id }, "removing a container the host has no record of");
      await this.runtime.delete(info.id);
      // A pre-warmed runner or sandbox of a previous agent has these too, and no record.
      this.bridges.removeDir(info.id);
      this.inits.close(info.id);
      rmSync(join(this.hostsDir, info.id), { force: true });
    }
    const live: string[] = [];
    for (const r of [...this.byId.values()]) {
      const info = this.runtime.get(r.id);
      if (!info) {
        log.warn({ id: r.id }, "dropping the record of a container that no longer exists");
        await this.bridges.close(r.id);
        this.inits.close(r.id);
        this.forget(r.id);
        continue;
      }
      try {
        this.options.images.markInUse(r.imageDigest, r.id);
      } catch (e) {
        log.warn(
          { id: r.id, digest: r.imageDigest, err: describeError(e) },
          "image of a live container is gone",
        );
      }
      if (info.status === "running" && !r.released) {
        this.allocations.hold(r.id, {
          ...r,
          ...(r.request.gpu?.memoryMiB !== undefined ? { gpuMemoryMiB: r.request.gpu.memoryMiB } : {}),
        });
        live.push(r.id);
        if (r.request.runner) await this.bridges.reopen(r.id, r.request.runner, log, gangRankOf(r.labels));
        else if (r.request.bridge)
          await this.bridges.reopenWorkspace(r.id, r.request.bridge.workspaceId, log);
      } else if (!r.released) {
        this.markReleased(r);
      }
    }
    this.processes.recover(this.byId.keys());
    // Buckets of containers that stopped or vanished while no agent ran.
    await this.buckets.sweep(new Set(live));
    const report = await this.options.network.recover(live);
    if (report.missingNamespace.length > 0) {
      log.warn({ ids: report.missingNamespace }, "running containers whose network namespace is gone");
    }
  }

  /** Removes the pre-warmed runners and sandboxes not given yet (an agent that stops: the next one would remove them). */
  async drainWarmRunners(): Promise<void> {
    await Promise.all([this.warm.drain(), this.warmSandboxes.drain()]);
  }

  /** Stops the runtime's timers and watchers; containers keep running (for an agent restart). */
  close(): void {
    this.warm.close();
    this.warmSandboxes.close();
    this.processes.close();
    this.runtime.close();
  }

  runContainer(input: RunContainerRequest): Promise<ContainerStatus> {
    return this.startContainer(input, (spec) => this.runtime.run(spec), true);
  }

  /** runContainer with the runtime's last step (`runc run`, or `runc restore` for a snapshot) given. */
  private async startContainer(
    input: RunContainerRequest,
    start: StartStep,
    warm = false,
  ): Promise<ContainerStatus> {
    const req = resolveRunRequest(input);
    const { id } = req;
    this.assertNew(id);
    const mounts: BindMount[] = req.mounts.map((m, i) => ({
      source: checkMountSource(m.source, this.options.allowedMountRoots, `mounts[${i}].source`),
      destination: m.destination,
      readonly: m.readOnly,
    }));
    const codeDir = req.code ? this.codeDirOf(req.code.sha256) : undefined;
    if (req.runner) this.bridges.check();
    const [hostResources, gpuReport] = await Promise.all([this.options.capacity(), this.options.gpus()]);
    // From here to hold() nothing awaits: the check and the reservation are one step.
    this.assertNew(id);
    this.allocations.checkFits(hostResources, req);
    const gpus = pickGpus(gpuReport, req.gpu, this.allocations.heldGpus(), this.allocations.sharedGpuUse());
    if (gpus.length > 0 && !this.options.gpuInjector) {
      throw new BerthError(
        "failed_precondition",
        "this agent has no GPU injector configured; cannot give GPUs",
      );
    }
    this.allocations.hold(id, {
      cpu: req.cpu,
      memoryBytes: req.memoryBytes,
      gpus: gpus.map((g) => g.uuid),
      ...(req.gpu?.memoryMiB !== undefined ? { gpuMemoryMiB: req.gpu.memoryMiB } : {}),
    });
    this.starting.add(id);
    try {
      const codeLayer = req.code ? this.code.layer(req.code.sha256) : undefined;
      if (warm) {
        const given =
          (await this.warm.giveFor(req, mounts.length, codeDir)) ??
          (await this.warmSandboxes.giveFor(req, mounts.length, codeDir));
        if (given) return given;
      }
      return await provisionContainer(this.provisioning, { req, gpus, mounts, codeDir, codeLayer }, start);
    } finally {
      this.starting.delete(id);
    }
  }

  stopContainer(id: string, opts: { graceMs?: number; remove?: boolean } = {}): Promise<ContainerStatus> {
    if (!opts.remove) return this.stopOnce(id, opts);
    return this.removing.run(id, () => this.stopOnce(id, opts));
  }

  private async stopOnce(id: string, opts: { graceMs?: number; remove?: boolean }): Promise<ContainerStatus> {
    const record = this.mustGet(id);
    const graceMs = opts.graceMs ?? this.options.defaultGraceMs;
    if (!Number.isInteger(graceMs) || graceMs < 0) {
      throw new BerthError("invalid_request", `graceMs must be an integer >= 0, got ${graceMs}`);
    }
    const current = this.runtime.get(id);
    const info = current?.status === "running" ? await this.runtime.stop(id, { graceMs }) : current;
    await this.release(record);
    const status = recordStatus(record, info);
    if (opts.remove) {
      this.processes.drop(id);
      await this.runtime.delete(id);
      await this.bridges.close(id);
      this.inits.close(id);
      await this.options.network.detach(id);
      this.options.images.release(record.imageDigest, id);
      this.forget(id);
    }
    return status;
  }

  async getContainer(id: string): Promise<ContainerStatus> {
    const record = this.mustGet(id);
    return recordStatus(record, this.runtime.get(id));
  }

  async listContainers(filter: { labels?: Record<string, string> } = {}): Promise<ContainerStatus[]> {
    const want = Object.entries(filter.labels ?? {});
    const out: ContainerStatus[] = [];
    for (const r of this.byId.values()) {
      if (this.starting.has(r.id)) continue;
      if (!want.every(([k, v]) => r.labels[k] === v)) continue;
      out.push(recordStatus(r, this.runtime.get(r.id)));
    }
    return out.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id));
  }

  async setNetworkPolicy(id: string, policy: EgressPolicy): Promise<ContainerStatus> {
    const p = validateEgressPolicy(policy);
    const record = this.mustGet(id);
    if (record.released || this.runtime.get(id)?.status !== "running") {
      throw new BerthError("failed_precondition", `container ${id} is not running; its network is gone`);
    }
    const net = await this.options.network.setPolicy(id, p);
    record.egress = net.policy;
    this.records.write(record);
    return recordStatus(record, this.runtime.get(id));
  }

  async exposePort(id: string, port: number): Promise<ContainerStatus> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      const got = JSON.stringify(port);
      throw new BerthError("invalid_request", `port ${got} is not an integer 1..65535`, { field: "port" });
    }
    const record = this.mustGet(id);
    if (record.released || this.runtime.get(id)?.status !== "running") {
      throw new BerthError("failed_precondition", `container ${id} is not running; its network is gone`);
    }
    // The rule first: the tunnel connects to listed ports only, so a listed port is always open.
    await this.options.network.allowInbound(id, port);
    if (!record.exposedPorts.includes(port)) {
      record.exposedPorts = [...record.exposedPorts, port];
      this.records.write(record);
    }
    return recordStatus(record, this.runtime.get(id));
  }

  async *streamLogs(
    id: string,
    opts: { follow?: boolean; tail?: number; signal?: AbortSignal } = {},
  ): AsyncIterable<LogEntry> {
    this.mustGet(id);
    if (opts.tail !== undefined && (!Number.isInteger(opts.tail) || opts.tail < 0)) {
      throw new BerthError("invalid_request", `tail must be an integer >= 0, got ${opts.tail}`);
    }
    yield* streamLogFiles({
      containerId: id,
      files: this.runtime.logFiles(id),
      tail: opts.tail,
      follow: opts.follow === true,
      signal: opts.signal,
      stopped: () => {
        const s = this.runtime.get(id)?.status;
        return s === undefined || s === "stopped";
      },
    });
  }

  async exec(id: string, req: ExecRequest): Promise<ExecSession> {
    const r = resolveExecRequest(req);
    this.mustGet(id);
    if (this.runtime.get(id)?.status !== "running") {
      throw new BerthError("failed_precondition", `container ${id} is not running`);
    }
    const t = this.runtime.execTarget(id);
    const target = {
      runc: t.bin,
      runcRoot: this.runtime.options.runcRoot,
      globalArgs: t.globalArgs,
      sandboxPids: t.runtime === "runsc",
      // A pre-warmed runner keeps, to runc, the name it started under.
      containerId: t.ociId,
      tmpDir: this.execDir,
    };
    if (r.tty) {
      if (t.runtime === "runsc") {
        throw new BerthError(
          "failed_precondition",
          `container ${id} runs under gVisor, whose exec has no tty (runsc exec --tty does not exist); run it without a tty`,
          { field: "tty" },
        );
      }
      return startTtyExec(target, r);
    }
    await this.inits.listening(id);
    // On the connection made ahead; one the server closed meanwhile started nothing: a new one then.
    const ahead = await this.inits.takeAhead(id);
    const session =
      (ahead && (await startInitExec(async () => ahead, r))) ||
      (await startInitExec(() => connectInit(this.inits.socketOf(id)), r));
    if (!session) return startPipeExec(target, r);
    this.inits.connectAhead(id);
    return session;
  }

  async pullImage(ref: string, opts: PullImageOptions = {}): Promise<ImageSummary> {
    return pullImage(this.options.images, ref, opts);
  }

  async listImages(): Promise<ImageSummary[]> {
    return this.options.images.list().map(imageSummary);
  }

  async removeImage(ref: string): Promise<void> {
    await this.options.images.remove(ref);
  }

  async importImage(req: import("../../api/index.ts").ImportImageRequest): Promise<ImageSummary> {
    return imageSummary(await importImage(imageOpsStore(this.options.images), req));
  }

  async gcImages(opts?: { unusedForMs?: number }): Promise<import("../../api/index.ts").ImageGcResult> {
    return gcImages(imageOpsStore(this.options.images), opts);
  }

  private onRuntimeEvent(e: ContainerEvent): void {
    for (const pool of [this.warm, this.warmSandboxes]) {
      if (e.type === "exit" && pool.owns(e.containerId)) {
        pool.exited(e.containerId);
        return;
      }
    }
    const record = this.byId.get(e.containerId);
    if (!record) return;
    if (e.type === "exit" && !record.released) {
      this.markReleased(record);
      void this.unmountBuckets(record.id);
      // The namespace of a dead container serves nothing; recover() releases it when recovering.
      if (!this.recovering) {
        this.options.network
          .detach(record.id)
          .catch((err) =>
            this.options.logger.error({ id: record.id, err: describeError(err) }, "releasing the network"),
          );
      }
    }
    const status = recordStatus(record, this.runtime.get(e.containerId));
    if (e.type === "exit" && record.request.runner)
      this.bridges.exited(record.id, status.exitCode, status.reason, status.memoryBytes);
    const ev =
      e.type === "start"
        ? { type: "start" as const, containerId: e.containerId, at: e.at, status }
        : { type: "exit" as const, containerId: e.containerId, at: e.at, status, stderrTail: e.stderrTail };
    try {
      this.options.onEvent(ev);
    } catch (err) {
      this.options.logger.error({ err: describeError(err) }, "onEvent handler threw");
    }
  }

  /** Frees what a stopped container no longer needs: CPU, memory, GPUs, network. */
  private async release(record: HostRecord): Promise<void> {
    if (!record.released) this.markReleased(record);
    await this.unmountBuckets(record.id);
    await this.options.network.detach(record.id);
  }

  /** A stopped container's bucket mounts go with it; a failure is logged, not thrown (the stop happened). */
  private unmountBuckets(id: string): Promise<void> {
    return this.buckets
      .unmount(id)
      .catch((err) => this.options.logger.error({ id, err: describeError(err) }, "unmounting cloud buckets"));
  }

  private markReleased(record: HostRecord): void {
    this.allocations.free(record.id);
    record.released = true;
    try {
      this.records.write(record);
    } catch (e) {
      this.options.logger.error({ id: record.id, err: describeError(e) }, "saving the host record");
    }
  }

  private forget(id: string): void {
    this.allocations.free(id);
    this.byId.delete(id);
    this.records.remove(id);
    rmSync(join(this.hostsDir, id), { force: true });
  }

  async hasCode(sha256: string): Promise<boolean> {
    return this.code.has(sha256);
  }

  async putCode(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void> {
    await this.code.put(sha256, data);
  }

  private codeDirOf(sha256: string): string {
    if (!this.code.has(sha256)) {
      throw new BerthError(
        "failed_precondition",
        `code archive ${sha256} is not on this agent: put the code first (PutCode), then run the container`,
        { sha256 },
      );
    }
    return this.code.dir(sha256);
  }

  private assertNew(id: string): void {
    if (this.byId.has(id) || this.starting.has(id) || this.runtime.get(id)) {
      throw new BerthError("conflict", `container ${id} already exists`);
    }
  }

  private mustGet(id: string): HostRecord {
    const r = this.byId.get(id);
    if (!r || this.starting.has(id)) throw notFound(`container ${id}`);
    return r;
  }
}
