import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BerthError, describeError, notFound } from "../../shared/errors.ts";
import { SingleFlight } from "../single-flight.ts";
import {
  type CgroupLayout,
  type CgroupUsage,
  detectCgroups,
  readOomState,
  readPidsLimit,
  readPidsRefused,
  readUsage,
  removeCgroupDirs,
  writeCpuQuota,
} from "./cgroups.ts";
import {
  type ContainerEntry,
  newEntry,
  observedExit,
  persistEntryMeta,
  signalEntry,
  startEntryLogs,
} from "./entry.ts";
import { buildBundle, mountCodeInBundle, takeBundleApart } from "./bundle.ts";
import { type Assignment, assignedSpec, assignmentUpdate, writeExecProcess } from "./handover.ts";
import { cgroupsPathFor, cpuQuotaUs, type HostFacts } from "./oci-spec.ts";
import {
  type ContainerRuntimeOptions,
  type ResolvedContainerRuntimeOptions,
  resolveContainerRuntimeOptions,
} from "./options.ts";
import { ContainerDisks } from "./disks.ts";
import { surveyLeftovers } from "./leftovers.ts";
import { readHostHardLimits } from "./rlimits.ts";
import { type IdMap, pickIdMap, sharedRootfsDir, sharedTreesOf } from "./idmap.ts";
import { IdmapHelper } from "./idmap-helper.ts";
import { type OciRuntimeName, OciRuntimeClis } from "./oci-runtimes.ts";
import { type RestoreImages, type Runc, restoreImages } from "./runc.ts";
import {
  checkContainerId,
  checkCpuAndMemory,
  checkOverlayLowerDir,
  checkSpecPaths,
  resolveContainerSpec,
} from "./spec.ts";
import { waitForStart } from "./start-wait.ts";
import {
  type ContainerMeta,
  containerInfo,
  containerPaths,
  exitReason,
  readMeta,
  rootfsOf,
  writeMeta,
} from "./state.ts";
import type { ContainerEvent, ContainerInfo, ContainerLimits, ContainerSpec } from "./types.ts";

export type { ContainerRuntimeOptions, ResolvedContainerRuntimeOptions };
export { resolveContainerRuntimeOptions };

const STOP_KILL_WAIT_MS = 30_000;

/** How a process is started in a running container: its runtime's CLI and the container's root on the host. */
export interface ExecTarget {
  runtime: OciRuntimeName;
  bin: string;
  /** Global flags before `exec`, --root included. */
  globalArgs: string[];
  /** Where the container's root (its overlay) is mounted on the host. */
  rootfs: string;
  /** The name its OCI runtime knows it by (a pre-warmed container keeps the one it started under). */
  ociId: string;
  /** Its user namespace's id range (absent: root inside is the host's root). */
  idMap?: IdMap;
  /** With idMap: its idmapped bind mounts (volumes, bridges), deepest destination first. */
  sharedTrees?: { destination: string; source: string }[];
}

/** The name runc, the bundle dir and the cgroup know a container by. */
const ociIdOf = (e: ContainerEntry) => e.meta.ociId ?? e.meta.spec.id;

/** Runs containers with runc (or crun, or runsc) on this host; see docs/runtime.md. */
export class ContainerRuntime {
  readonly options: ResolvedContainerRuntimeOptions;
  readonly cgroups: CgroupLayout;
  /** Read by buildBundle. */
  readonly host: HostFacts;
  private readonly clis: OciRuntimeClis;
  private readonly entries = new Map<string, ContainerEntry>();
  /** Deletes under way: a second delete of the same id waits for the first (several coordinators may ask at once). */
  private readonly deleting = new SingleFlight<void>();
  private readonly reservedIdMaps = new Map<string, IdMap>();
  private timer?: NodeJS.Timeout;
  private closed = false;
  /** The containers' own disks, read by buildBundle. */
  readonly disks: ContainerDisks;
  /** Makes idmapped mounts for user-namespaced containers: one python3 process, kept while in use. */
  readonly idmaps = new IdmapHelper();

  constructor(opts: ContainerRuntimeOptions) {
    this.options = resolveContainerRuntimeOptions(opts);
    this.cgroups = detectCgroups();
    this.host = {
      cgroupVersion: this.cgroups.version,
      hardLimits: readHostHardLimits(),
      swapAccounting: this.cgroups.swapAccounting,
      arch: process.arch,
      cgroupParent: this.options.cgroupParent,
    };
    this.disks = new ContainerDisks(
      this.options.root,
      this.options.diskBytes,
      this.options.diskPoolSize,
      this.options.logger,
    );
    this.clis = new OciRuntimeClis(this.options.bins, this.options.stateRoots, this.cgroups);
    mkdirSync(this.options.root, { recursive: true });
  }

  /** The id ranges of this runtime's containers, live or not yet removed, and those reserved. */
  private *idMaps(): Iterable<IdMap> {
    for (const e of this.entries.values()) if (e.meta.idMap) yield e.meta.idMap;
    yield* this.reservedIdMaps.values();
  }

  /**
   * Picks the id range container `id` will get when run() with
   * userNamespace, so that what is prepared for it before (a cloud bucket's
   * owner) can use it. run() takes it over; releaseIdMap() frees it unused.
   */
  reserveIdMap(id: string): IdMap {
    const held = this.reservedIdMaps.get(id);
    if (held) return held;
    const map = pickIdMap(this.idMaps());
    this.reservedIdMaps.set(id, map);
    return map;
  }

  releaseIdMap(id: string): void {
    this.reservedIdMaps.delete(id);
  }

  private cli(name: OciRuntimeName): Runc {
    return this.clis.cli(name);
  }

  /** How to start a process in container `id` (runtime CLI, flags, its root on the host). */
  execTarget(id: string): ExecTarget {
    const runtime = this.mustGet(id).meta.spec.runtime ?? "runc";
    const c = this.cli(runtime);
    const e = this.mustGet(id);
    return {
      runtime,
      bin: c.bin,
      globalArgs: [...c.globalArgs],
      rootfs: rootfsOf(e.meta, e.paths.dir),
      ociId: ociIdOf(e),
      ...(e.meta.idMap ? { idMap: { ...e.meta.idMap }, sharedTrees: sharedTreesOf(e.meta.spec.mounts) } : {}),
    };
  }

  /** The cgroup path (relative to each hierarchy's mount) of a container. */
  cgroupsPath(id: string): string {
    return cgroupsPathFor(id, this.options.cgroupParent);
  }

  async run(input: ContainerSpec): Promise<ContainerInfo> {
    this.assertOpen();
    const spec = resolveContainerSpec(input);
    if (this.entries.has(spec.id)) throw new BerthError("conflict", `container ${spec.id} already exists`);
    checkSpecPaths(spec);
    spec.runtime ??= this.options.defaultRuntime;
    const startFlags = this.clis.startFlags(spec.runtime, spec.extraDevices.length > 0, spec.netnsPath);
    if (input.restoreFrom !== undefined && spec.runtime !== "runc") {
      throw new BerthError(
        "failed_precondition",
        `memory snapshots are restored with runc (CRIU); this container asks for ${spec.runtime}`,
        { field: "runtime" },
      );
    }
    const paths = containerPaths(this.options.root, spec.id);
    try {
      mkdirSync(paths.dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EEXIST") {
        throw new BerthError("conflict", `container ${spec.id} already exists (${paths.dir})`);
      }
      throw e;
    }
    // gVisor's sandbox is a kernel of its own: its root is not the host's root either way.
    const reserved = this.reservedIdMaps.get(spec.id);
    this.reservedIdMaps.delete(spec.id);
    const idMap =
      spec.userNamespace && spec.runtime !== "runsc" ? (reserved ?? pickIdMap(this.idMaps())) : undefined;
    const meta: ContainerMeta = {
      version: 1,
      spec,
      cgroupsPath: this.cgroupsPath(spec.id),
      ...(idMap ? { idMap, rootfs: join(sharedRootfsDir(this.options.root), spec.id) } : {}),
      createdAt: Date.now(),
      pid: 0,
      logOffsets: { stdout: 0, stderr: 0 },
    };
    const entry = newEntry(meta, paths, "created");
    this.entries.set(spec.id, entry);
    try {
      await buildBundle(paths, meta, this);
      // Not kept in meta: a recovered container is past its start either way.
      const restore =
        input.restoreFrom === undefined ? undefined : restoreImages(input.restoreFrom, paths.dir);
      this.spawnWaiter(entry, restore, startFlags);
      writeMeta(paths.meta, entry.meta);
      entry.meta.pid = await this.waitForStart(entry);
    } catch (e) {
      await this.removeContainer(entry.meta.spec.id, entry).catch((c) =>
        this.options.logger?.error({ id: spec.id, err: describeError(c) }, "cleanup after failed start"),
      );
      this.entries.delete(spec.id);
      throw e;
    }
    this.markRunning(entry);
    // The disk it took is made again behind it, once this start is out of the way.
    setImmediate(() => {
      if (!this.closed) this.disks.refill();
    });
    if (spec.startupWindowMs > 0) {
      entry.heldEvents = [];
      await entry.wakeup.until(() => entry.status === "stopped", spec.startupWindowMs);
      await entry.finalizing;
      const exit = entry.meta.exit;
      if (exit && exit.code !== 0) {
        const stderr = entry.logs?.stderr.tail() ?? "";
        await this.delete(spec.id);
        throw new BerthError(
          "failed_precondition",
          `container ${spec.id} exited with code ${exit.code} (${exit.reason}) during start-up${stderr ? `:\n${stderr}` : ""}`,
          { containerId: spec.id, exitCode: exit.code, reason: exit.reason, stderr },
        );
      }
      const held = entry.heldEvents;
      entry.heldEvents = undefined;
      for (const ev of held) this.emit(ev);
    }
    return this.info(entry);
  }

  /** run(), with the processes brought back by `runc restore` from the CRIU images in checkpointDir. */
  restore(spec: ContainerSpec, checkpointDir: string): Promise<ContainerInfo> {
    return this.run({ ...spec, restoreFrom: checkpointDir });
  }

  /** Mounts `lowerDir` at the running container's spec.codeSlot (bundle.ts). */
  async mountCode(id: string, lowerDir: string): Promise<void> {
    const e = this.mustGet(id);
    const dir = checkOverlayLowerDir(lowerDir, "lowerDir");
    if (!e.meta.spec.codeSlot) {
      throw new BerthError("failed_precondition", `container ${id} was started without a code slot`);
    }
    if (e.status !== "running") throw new BerthError("failed_precondition", `container ${id} is not running`);
    await mountCodeInBundle(e.paths.dir, e.meta.idMap, dir, this);
  }

  /**
   * Gives the running container `fromId` (a pre-warmed one) its stub: it is
   * known as `toId` from now on (events, logs, every method here; runc and
   * its bundle dir keep the old name), and its cgroup gets the stub's limits
   * (`runc update`), its labels and its timeout, counted from now. A "start"
   * event for `toId` follows.
   */
  async assign(
    fromId: string,
    toId: string,
    a: Assignment,
    o: { limited?: boolean } = {},
  ): Promise<ContainerInfo> {
    this.assertOpen();
    checkContainerId(toId);
    const entry = this.assignable(fromId, a);
    if (this.entries.has(toId)) throw new BerthError("conflict", `container ${toId} already exists`);
    const next = assignedSpec(entry.meta.spec, toId, a);
    if (!o.limited)
      await this.cli(entry.meta.spec.runtime ?? "runc").update(
        ociIdOf(entry),
        assignmentUpdate(next, this.host),
      );
    if (a.exec) writeExecProcess(entry.paths.config, a.exec);
    entry.meta.ociId = ociIdOf(entry);
    entry.meta.spec = next;
    const now = Date.now();
    entry.meta.timeoutAt = a.timeoutMs === undefined ? undefined : now + a.timeoutMs;
    this.entries.delete(fromId);
    this.entries.set(toId, entry);
    entry.logs?.stdout.relabel(toId);
    entry.logs?.stderr.relabel(toId);
    this.persistMeta(entry);
    this.emit({ type: "start", containerId: toId, pid: entry.meta.pid, at: now });
    return this.info(entry);
  }

  /**
   * The cgroup limits (`runc update`) assign() would give the running
   * container `id`, given now: a caller may do this beside other steps and
   * then assign with `limited`. Its id, labels and timeout stay as they are.
   */
  async limit(id: string, a: Assignment): Promise<void> {
    this.assertOpen();
    const entry = this.assignable(id, a);
    const next = assignedSpec(entry.meta.spec, id, a);
    await this.cli(entry.meta.spec.runtime ?? "runc").update(
      ociIdOf(entry),
      assignmentUpdate(next, this.host),
    );
  }

  /** A running container that may be given new limits (not under gVisor). */
  private assignable(id: string, a: Assignment): ContainerEntry {
    checkCpuAndMemory(a.cpu, a.memoryBytes);
    const entry = this.mustGet(id);
    if (entry.status !== "running") {
      throw new BerthError("failed_precondition", `container ${id} is not running`);
    }
    if ((entry.meta.spec.runtime ?? "runc") === "runsc") {
      throw new BerthError(
        "failed_precondition",
        "a gVisor container cannot be given new limits while it runs",
      );
    }
    return entry;
  }

  /** SIGTERM, then SIGKILL after graceMs; resolves once the container has exited. */
  async stop(id: string, opts: { graceMs?: number } = {}): Promise<ContainerInfo> {
    const entry = this.mustGet(id);
    if (entry.status === "created")
      throw new BerthError("failed_precondition", `container ${id} is still starting`);
    const graceMs = opts.graceMs ?? 10_000;
    if (entry.status === "running" && graceMs > 0) {
      this.setIntent(entry, "term");
      signalEntry(entry, "SIGTERM");
      await entry.wakeup.until(() => entry.status === "stopped", graceMs);
    }
    if (entry.status === "running") {
      this.setIntent(entry, "kill");
      signalEntry(entry, "SIGKILL");
      if (!(await entry.wakeup.until(() => entry.status === "stopped", STOP_KILL_WAIT_MS))) {
        throw new BerthError(
          "unavailable",
          `container ${id} did not exit ${STOP_KILL_WAIT_MS} ms after SIGKILL`,
        );
      }
    }
    await entry.finalizing;
    return this.info(entry);
  }

  /** Stops (no grace) and removes everything the container had; a no-op for unknown ids. */
  delete(id: string): Promise<void> {
    return this.deleting.run(id, () => this.deleteOnce(id));
  }

  private async deleteOnce(id: string): Promise<void> {
    const entry = this.entries.get(id);
    if (entry?.status === "created")
      throw new BerthError("failed_precondition", `container ${id} is still starting`);
    if (entry?.status === "running") await this.stop(id, { graceMs: 0 });
    await entry?.finalizing;
    await this.removeContainer(id, entry);
    this.entries.delete(id);
    this.updateTimer();
  }

  list(): ContainerInfo[] {
    return [...this.entries.values()].map((e) => this.info(e));
  }

  get(id: string): ContainerInfo | undefined {
    const e = this.entries.get(id);
    return e && this.info(e);
  }

  /** The container's stdout/stderr spools (append-only files; see LogFollower), for readers of past output. */
  logFiles(id: string): { stdout: string; stderr: string } {
    const p = this.entries.get(id)?.paths ?? containerPaths(this.options.root, id);
    return { stdout: p.stdout, stderr: p.stderr };
  }

  /**
   * Ends a container's start-up CPU boost (spec.startupCpu): its cap becomes
   * spec.cpu. No-op for a container without a boost, or one already ended or gone.
   */
  endStartupCpu(id: string): void {
    const e = this.entries.get(id);
    const spec = e?.meta.spec;
    if (!e || !spec || spec.startupCpu === undefined || e.status === "stopped") return;
    writeCpuQuota(this.cgroups, e.meta.cgroupsPath, cpuQuotaUs(spec.cpu));
    const { startupCpu: _ended, ...capped } = spec;
    e.meta.spec = capped;
    writeMeta(e.paths.meta, e.meta);
  }

  private endStartupCpuQuietly(id: string): void {
    try {
      this.endStartupCpu(id);
    } catch (e) {
      this.options.logger?.warn({ id, err: describeError(e) }, "cannot end a container's start-up CPU boost");
    }
  }

  /** CPU and memory use from the container's cgroup (for metrics). */
  usage(id: string): CgroupUsage {
    return readUsage(this.cgroups, this.mustGet(id).meta.cgroupsPath);
  }

  /**
   * What the container's limits refused so far, for naming why a task in it
   * failed: how full its disk is, and how many forks its pids cgroup refused.
   * Undefined for an unknown container.
   */
  limits(id: string): ContainerLimits | undefined {
    const e = this.entries.get(id);
    if (!e) return undefined;
    const disk = this.disks.usage(e.paths.dir);
    let limit: number | null = null;
    try {
      limit = readPidsLimit(this.cgroups, e.meta.cgroupsPath);
    } catch {
      // The cgroup is gone (the container just ended): the count below is undefined too.
    }
    const refused = readPidsRefused(this.cgroups, e.meta.cgroupsPath);
    return {
      ...(disk ? { disk: { sizeBytes: disk.sizeBytes, freeBytes: disk.freeBytes, full: disk.full } } : {}),
      pids: { limit, ...(refused !== undefined ? { refused } : {}) },
    };
  }

  /** Forks the container's pids cgroup refused so far (pids.events `max`); undefined: unknown container or not counted. */
  pidsRefused(id: string): number | undefined {
    const e = this.entries.get(id);
    return e && readPidsRefused(this.cgroups, e.meta.cgroupsPath);
  }

  /**
   * Adopts what a previous agent left: running containers keep running and
   * are watched again (logs resume from saved offsets); ones that exited
   * meanwhile get their exit event; leftovers without a bundle (or a bundle
   * without a runc container) are removed.
   */
  async recover(): Promise<ContainerInfo[]> {
    this.assertOpen();
    await this.disks.recover();
    const left = await surveyLeftovers({
      root: this.options.root,
      stateRoots: this.options.stateRoots,
      clis: this.clis,
      adopted: new Set([...this.entries.values()].map(ociIdOf)),
      notBundle: (name) => this.disks.owns(name),
    });
    for (const { ociId, id, meta, runcStatus } of left.remove) {
      if (meta && !meta.exit && meta.startedAt) {
        this.emit({
          type: "exit",
          containerId: id,
          exitCode: -1,
          reason: "unknown",
          at: Date.now(),
          stderrTail: "",
        });
      }
      this.options.logger?.warn({ id, runc: runcStatus }, "removing container left without state");
      await this.removeContainer(ociId, undefined);
    }
    for (const { id, meta, paths, runc } of left.adopt) {
      const entry = newEntry(
        { ...meta, pid: runc.pid || meta.pid },
        paths,
        meta.exit ? "stopped" : "running",
      );
      this.entries.set(id, entry);
      if (entry.status === "running") {
        startEntryLogs(entry, this.options);
        // Whoever would have ended a start-up boost went away with the previous agent.
        this.endStartupCpuQuietly(id);
        await this.checkExit(entry);
      }
    }
    for (const { id, runtime } of left.orphans) {
      this.options.logger?.warn({ id, runtime }, "removing a container whose bundle is gone");
      await this.removeContainer(id, undefined, runtime);
    }
    this.updateTimer();
    this.disks.refill();
    return this.list();
  }

  /** Stops watching (timers, files) and saves log offsets; containers keep running. */
  close(): void {
    this.closed = true;
    this.idmaps.close();
    this.disks.stop();
    clearInterval(this.timer);
    this.timer = undefined;
    for (const e of this.entries.values()) {
      if (e.status === "running") this.persistMeta(e);
      e.logs?.stdout.close();
      e.logs?.stderr.close();
      e.child?.removeAllListeners();
    }
    this.entries.clear();
  }

  /**
   * Unmounts and deletes the disks made ahead of demand (close() leaves
   * them for the next runtime on this root): for an agent that stops for good.
   */
  drainDisks(): Promise<void> {
    return this.disks.drain();
  }

  private spawnWaiter(
    entry: ContainerEntry,
    restore: RestoreImages | undefined,
    extraGlobalArgs: string[],
  ): void {
    const p = entry.paths;
    const child = this.cli(entry.meta.spec.runtime ?? "runc").spawnWaiter({
      bundle: p.dir,
      id: ociIdOf(entry),
      pidFile: p.pidFile,
      exitFile: p.exitFile,
      logFile: p.runcLog,
      stdout: p.stdout,
      stderr: p.stderr,
      ...(restore ? { restore } : {}),
      ...(extraGlobalArgs.length > 0 ? { extraGlobalArgs } : {}),
    });
    child.on("exit", () => {
      entry.wakeup.notify();
      // sh wrote the exit file just before exiting: no need to wait for the timer.
      if (entry.status === "running") void this.checkExit(entry);
    });
    child.on("error", () => entry.wakeup.notify());
    entry.child = child;
    entry.meta.waiterPid = child.pid;
  }

  private waitForStart(entry: ContainerEntry): Promise<number> {
    return waitForStart(
      { id: entry.meta.spec.id, paths: entry.paths, child: entry.child, wakeup: entry.wakeup },
      this.options.startTimeoutMs,
    );
  }

  private markRunning(entry: ContainerEntry): void {
    const now = Date.now();
    entry.status = "running";
    entry.meta.startedAt = now;
    if (entry.meta.spec.timeoutMs) entry.meta.timeoutAt = now + entry.meta.spec.timeoutMs;
    startEntryLogs(entry, this.options);
    this.persistMeta(entry);
    this.emit({ type: "start", containerId: entry.meta.spec.id, pid: entry.meta.pid, at: now });
    this.updateTimer();
    // A short-lived process may be gone already, its child-exit event spent
    // while the entry was still "created".
    void this.checkExit(entry);
  }

  private tick(): void {
    const now = Date.now();
    for (const entry of this.entries.values()) {
      if (entry.status !== "running") continue;
      void entry.logs?.stdout.poll().catch(() => {});
      void entry.logs?.stderr.poll().catch(() => {});
      if (entry.meta.timeoutAt && now >= entry.meta.timeoutAt && entry.meta.stopIntent !== "timeout") {
        this.setIntent(entry, "timeout");
        signalEntry(entry, "SIGKILL");
      }
      void this.checkExit(entry);
      const offsets = `${entry.logs?.stdout.offset}:${entry.logs?.stderr.offset}`;
      // At most once a second: after a crash, up to a second of lines is sent again.
      if (offsets !== entry.persistedOffsets && now - entry.persistedAt >= 1000) this.persistMeta(entry);
    }
  }

  private checkExit(entry: ContainerEntry): Promise<void> {
    if (entry.status !== "running" || entry.finalizing) return entry.finalizing ?? Promise.resolve();
    const exit = observedExit(entry);
    return exit ? this.finalize(entry, exit.code, exit.at) : Promise.resolve();
  }

  private finalize(entry: ContainerEntry, code: number, at: number): Promise<void> {
    entry.finalizing = (async () => {
      const oom = code < 0 ? {} : readOomState(this.cgroups, entry.meta.cgroupsPath);
      const reason = exitReason({ code, intent: entry.meta.stopIntent, oom });
      await Promise.all([entry.logs?.stdout.finish(), entry.logs?.stderr.finish()]).catch(() => {});
      entry.meta.exit = { code, reason, at };
      entry.status = "stopped";
      this.persistMeta(entry);
      this.emit({
        type: "exit",
        containerId: entry.meta.spec.id,
        exitCode: code,
        reason,
        at,
        stderrTail: entry.logs?.stderr.tail() ?? "",
      });
      entry.wakeup.notify();
      this.updateTimer();
    })();
    return entry.finalizing;
  }

  /** `ociName`: the container's name to runc (its bundle dir's name); an entry's own wins. */
  private async removeContainer(
    ociName: string,
    entry: ContainerEntry | undefined,
    runtime?: OciRuntimeName,
  ): Promise<void> {
    entry?.logs?.stdout.close();
    entry?.logs?.stderr.close();
    const id = entry ? ociIdOf(entry) : ociName;
    const dir = entry?.paths.dir ?? join(this.options.root, id);
    const name =
      runtime ?? entry?.meta.spec.runtime ?? readMeta(join(dir, "meta.json"))?.spec.runtime ?? "runc";
    // runc and crun keep one state dir per container; skip the spawn when there is none.
    // runsc keeps files named after the sandbox: always ask it.
    if (
      name === "runsc"
        ? existsSync(this.options.stateRoots.runsc)
        : existsSync(join(this.options.stateRoots[name], id))
    ) {
      await this.cli(name).deleteForce(id);
    }
    await takeBundleApart(dir, entry?.meta ?? readMeta(join(dir, "meta.json")), this.disks);
    const busy = removeCgroupDirs(this.cgroups, entry?.meta.cgroupsPath ?? this.cgroupsPath(id));
    if (busy.length > 0) this.options.logger?.warn({ id, busy }, "cgroup dirs still in use");
    rmSync(dir, { recursive: true, force: true });
  }

  private setIntent(entry: ContainerEntry, intent: NonNullable<ContainerMeta["stopIntent"]>): void {
    // A timeout is the reason even if stop() escalates afterwards.
    if (entry.meta.stopIntent === "timeout") return;
    entry.meta.stopIntent = intent;
    this.persistMeta(entry);
  }

  private persistMeta(entry: ContainerEntry): void {
    persistEntryMeta(entry, this.options.logger);
  }

  private emit(ev: ContainerEvent): void {
    const entry = this.entries.get(ev.containerId);
    if (entry?.heldEvents) {
      entry.heldEvents.push(ev);
      return;
    }
    try {
      this.options.onEvent(ev);
    } catch (e) {
      this.options.logger?.error({ err: describeError(e) }, "onEvent handler threw");
    }
  }

  private updateTimer(): void {
    const anyRunning = [...this.entries.values()].some((e) => e.status === "running");
    if (anyRunning && !this.timer && !this.closed) {
      this.timer = setInterval(() => this.tick(), this.options.pollIntervalMs);
    } else if (!anyRunning && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  private info(e: ContainerEntry): ContainerInfo {
    return containerInfo(e.meta, e.status);
  }

  private mustGet(id: string): ContainerEntry {
    const e = this.entries.get(id);
    if (!e) throw notFound(`container ${id}`);
    return e;
  }

  private assertOpen(): void {
    if (this.closed) throw new BerthError("failed_precondition", "this ContainerRuntime was closed");
  }
}
