// Managed databases (docs/databases.md): PostgreSQL or Redis as a pod of the
// workspace (the sandbox service's pods, placed by the one planner), its data
// on a workspace volume, its connection URL in a workspace secret
// DB_<NAME>_URL. A create or start answers once the engine's readiness check
// passes inside the pod. Stop ends the pod and keeps everything else; delete
// keeps the volume and the secret (the password that opens the kept data)
// unless asked to remove them.

import type { Logger } from "pino";
import type { ExecRequest } from "../../api/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import type { DatabaseView } from "../../shared/databases.ts";
import { newId } from "../../shared/ids.ts";
import type { StubConfig } from "../../shared/tasks.ts";
import type { SandboxStubExtra } from "../sandboxes/index.ts";
import type { DatabaseEngine, DatabaseRecord, DatabaseRepo } from "./store.ts";
import type { StubInput, StubRecord } from "../tasks/index.ts";
import {
  DATA_MOUNT,
  checkDatabaseName,
  checkEngine,
  connectionUrl,
  databaseSecretName,
  databaseStubName,
  databaseVolumeName,
  engineEntrypoint,
  enginePort,
  newPassword,
  nextLocalPort,
  passwordOf,
  readinessCheck,
} from "./engines.ts";

/** The pods a database runs as: SandboxService's pod calls. */
export interface DatabasePods {
  create(
    workspaceId: string,
    stubId: string,
    opts: { expect: "pod" },
  ): Promise<{ sandboxId: string; agentId: string }>;
  get(workspaceId: string, id: string): Promise<{ status: string; terminatedReason: string | null }>;
  terminate(workspaceId: string, id: string): Promise<true>;
  exec(workspaceId: string, id: string, req: ExecRequest): Promise<{ pid: number }>;
  /** A process's status once it ends, or after timeoutMs while it still runs. */
  wait(
    workspaceId: string,
    id: string,
    pid: number,
    opts: { timeoutMs?: number },
  ): Promise<{ exitCode: number; status: string }>;
}

export interface DatabaseSecrets {
  create(workspaceId: string, name: string, value: string): Promise<unknown>;
  update(workspaceId: string, name: string, value: string): Promise<unknown>;
  delete(workspaceId: string, name: string): Promise<void>;
  resolve(workspaceId: string, names: readonly string[]): Promise<Record<string, string>>;
}

export interface DatabaseServiceOptions {
  repo: DatabaseRepo;
  stubs: { upsert(workspaceId: string, s: StubInput): Promise<{ stub: StubRecord }> };
  pods: DatabasePods;
  secrets: DatabaseSecrets;
  /**
   * The image reference every engine's pod runs (one holding engines.ts's
   * DATABASE_PACKAGES): the coordinator builds it per workspace through the
   * image builder, a test hands its own.
   */
  image: (workspaceId: string) => Promise<string>;
  /** Removes a workspace volume (delete with deleteData). */
  volumes: { remove(workspaceId: string, name: string): Promise<void> };
  log: Logger;
  /** How long a start waits for the readiness check. @default 120000 */
  readyTimeoutMs?: number;
  /** Pause between readiness checks. @default 500 */
  readyPollMs?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

export interface CreateDatabase {
  engine: unknown;
  name: unknown;
  /** CPU cores of the pod. @default 1 */
  cpu?: number;
  /** Memory of the pod in MiB. @default 1024 */
  memory?: number;
}

export type { DatabaseView } from "../../shared/databases.ts";

const iso = (ms: number) => new Date(ms).toISOString();
/** How long one readiness check may take. */
const READY_CHECK_WAIT_MS = 10_000;
/** A start whose pod create (an image pull included) has not come back for this long was abandoned. */
const ABANDONED_CREATE_MS = 30 * 60_000;

function checkSize(v: unknown, field: string, min: number, max: number, dflt: number): number {
  if (v === undefined || v === null) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max)
    throw new BerthError(
      "invalid_request",
      `${field} must be a number within ${min}..${max}, got ${JSON.stringify(v)}`,
      {
        field,
      },
    );
  return v;
}

export class DatabaseService {
  private readonly clock: () => number;
  private readonly readyTimeoutMs: number;
  private readonly readyPollMs: number;

  constructor(private readonly o: DatabaseServiceOptions) {
    this.clock = o.clock ?? Date.now;
    this.readyTimeoutMs = o.readyTimeoutMs ?? 120_000;
    this.readyPollMs = o.readyPollMs ?? 500;
  }

  /**
   * Creates the database and answers once it is ready. A secret
   * DB_<NAME>_URL left by an earlier delete that kept the data is reused
   * (its password opens that data); any other secret of that name is a
   * conflict.
   */
  async create(workspaceId: string, req: CreateDatabase): Promise<DatabaseView> {
    const engine = checkEngine(req.engine);
    const name = checkDatabaseName(req.name);
    const cpu = checkSize(req.cpu, "cpu", 0.1, 64, 1);
    const memory = checkSize(req.memory, "memory", 128, 1024 * 1024, 1024);
    if (await this.o.repo.find(workspaceId, name)) throw exists(name);
    const secretName = databaseSecretName(name);
    const localPort = nextLocalPort(engine, await this.o.repo.localPorts(workspaceId));
    const image = await this.o.image(workspaceId);
    const { stub } = await this.o.stubs.upsert(workspaceId, {
      name: databaseStubName(name),
      type: "pod",
      config: podConfig(name, cpu, memory),
      extra: podExtra(engine, secretName, image, cpu, localPort),
      objectId: null,
    });
    const rec = await this.o.repo.insert({
      id: newId("db"),
      workspaceId,
      name,
      engine,
      stubId: stub.id,
      volume: databaseVolumeName(name),
      secretName,
      localPort,
      createdAt: iso(this.clock()),
    });
    if (!rec) throw exists(name);
    try {
      await this.writeSecret(workspaceId, secretName, engine, localPort);
    } catch (e) {
      await this.o.repo.delete(rec.id);
      throw e;
    }
    this.o.log.info({ workspaceId, database: name, engine }, "database created");
    return this.view(await this.startPod(rec));
  }

  async get(workspaceId: string, name: string): Promise<DatabaseView> {
    return this.view(await this.reconciled(await this.recordOf(workspaceId, name)));
  }

  async list(workspaceId: string): Promise<DatabaseView[]> {
    const out: DatabaseView[] = [];
    for (const r of await this.o.repo.list(workspaceId)) out.push(this.view(await this.reconciled(r)));
    return out;
  }

  /** Starts a stopped or failed database again (its data as it was); a running one answers as it is. */
  async start(workspaceId: string, name: string): Promise<DatabaseView> {
    const rec = await this.reconciled(await this.recordOf(workspaceId, name));
    if (rec.status === "running") return this.view(rec);
    if (rec.status === "starting")
      throw new BerthError(
        "conflict",
        `database ${name} is starting already (a start cut short by a coordinator restart reads as failed once its readiness wait has passed; berth db restart ${name} ends it and starts again now)`,
        { name },
      );
    return this.view(await this.startPod(rec));
  }

  /** Ends the pod; the volume and the secret stay. Stopping a stopped database is no error. */
  async stop(workspaceId: string, name: string): Promise<DatabaseView> {
    const rec = await this.recordOf(workspaceId, name);
    await this.endPod(rec);
    await this.o.repo.setState(rec.id, { status: "stopped", podId: null, agentId: null }, iso(this.clock()));
    this.o.log.info({ workspaceId, database: name }, "database stopped");
    return this.view(await this.recordOf(workspaceId, name));
  }

  /** Stop, then start: the same data, a new pod. */
  async restart(workspaceId: string, name: string): Promise<DatabaseView> {
    await this.stop(workspaceId, name);
    return this.start(workspaceId, name);
  }

  /**
   * Stops the database and forgets it. Its volume and secret stay (a create
   * of the same name finds the data again) unless deleteData.
   */
  async delete(workspaceId: string, name: string, opts: { deleteData?: boolean } = {}): Promise<void> {
    const rec = await this.recordOf(workspaceId, name);
    await this.endPod(rec);
    if (opts.deleteData) {
      await this.o.volumes.remove(workspaceId, rec.volume).catch((e) => {
        if (!(e instanceof BerthError && e.code === "not_found")) throw e;
      });
      await this.o.secrets.delete(workspaceId, rec.secretName).catch((e) => {
        if (!(e instanceof BerthError && e.code === "not_found")) throw e;
      });
    }
    await this.o.repo.delete(rec.id);
    this.o.log.info(
      { workspaceId, database: name, deleteData: opts.deleteData === true },
      "database deleted",
    );
  }

  // ---- internals ----

  private async recordOf(workspaceId: string, name: string): Promise<DatabaseRecord> {
    const rec = typeof name === "string" ? await this.o.repo.find(workspaceId, name) : undefined;
    if (!rec) throw new BerthError("not_found", `database ${name} not found`, { name });
    return rec;
  }

  /** Creates DB_<NAME>_URL, or rewrites one an earlier delete kept with its password. */
  private async writeSecret(
    workspaceId: string,
    secretName: string,
    engine: DatabaseEngine,
    localPort: number,
  ): Promise<void> {
    let kept: string | undefined;
    try {
      kept = (await this.o.secrets.resolve(workspaceId, [secretName]))[secretName];
    } catch (e) {
      if (!(e instanceof BerthError && e.code === "not_found")) throw e;
    }
    if (kept === undefined) {
      await this.o.secrets.create(workspaceId, secretName, connectionUrl(engine, newPassword(), localPort));
      return;
    }
    const password = passwordOf(kept);
    if (!password)
      throw new BerthError(
        "conflict",
        `the workspace already has a secret ${secretName} that is no database URL of berth's; delete or rename it first`,
        { name: secretName },
      );
    await this.o.secrets.update(workspaceId, secretName, connectionUrl(engine, password, localPort));
  }

  /** Runs a pod for the record and waits for readiness; failed (and the pod ended) when it does not come up. */
  private async startPod(rec: DatabaseRecord): Promise<DatabaseRecord> {
    const at = () => iso(this.clock());
    await this.o.repo.setState(rec.id, { status: "starting", podId: null, agentId: null }, at());
    let podId: string | null = null;
    let agentId: string | null = null;
    try {
      const pod = await this.o.pods.create(rec.workspaceId, rec.stubId, { expect: "pod" });
      podId = pod.sandboxId;
      agentId = pod.agentId;
      await this.o.repo.setState(rec.id, { status: "starting", podId, agentId }, at());
      await this.waitReady(rec, podId);
      await this.o.repo.setState(rec.id, { status: "running", podId, agentId }, at());
      this.o.log.info({ workspaceId: rec.workspaceId, database: rec.name, podId, agentId }, "database ready");
    } catch (e) {
      const why = describeError(e);
      if (podId) await this.terminateQuietly(rec.workspaceId, podId);
      await this.o.repo.setState(rec.id, { status: "failed", podId: null, agentId: null, error: why }, at());
      throw new BerthError("unavailable", `database ${rec.name} did not start: ${why}`, { name: rec.name });
    }
    return this.recordOf(rec.workspaceId, rec.name);
  }

  private async waitReady(rec: DatabaseRecord, podId: string): Promise<void> {
    const secrets = await this.o.secrets.resolve(rec.workspaceId, [rec.secretName]);
    const password = passwordOf(secrets[rec.secretName] ?? "") ?? "";
    const check = readinessCheck(rec.engine, password);
    const deadline = this.clock() + this.readyTimeoutMs;
    for (;;) {
      const pod = await this.o.pods.get(rec.workspaceId, podId);
      if (pod.status === "terminated")
        throw new Error(
          `its pod ${podId} ended before it was ready (${pod.terminatedReason ?? "no reason given"})`,
        );
      const p = await this.o.pods.exec(rec.workspaceId, podId, check);
      const r = await this.o.pods.wait(rec.workspaceId, podId, p.pid, { timeoutMs: READY_CHECK_WAIT_MS });
      if (r.status !== "running" && r.exitCode === 0) return;
      if (this.clock() >= deadline)
        throw new Error(
          `its readiness check (${check.args[0] === "pg_isready" ? "pg_isready" : "redis-cli ping"}) did not pass within ${Math.round(this.readyTimeoutMs / 1000)} s`,
        );
      await new Promise((r) => setTimeout(r, this.readyPollMs));
    }
  }

  /**
   * A start nobody finishes is failed: a coordinator that died between the
   * pod's start and its readiness leaves the record starting. Its pod was
   * made (podId set) longer ago than the readiness wait, or its pod create
   * began longer ago than ABANDONED_CREATE_MS (an image pull included): no
   * live start can still be at work on it, so its pod is ended and the
   * record failed, saying why.
   */
  private async abandonedStartEnded(rec: DatabaseRecord): Promise<DatabaseRecord> {
    const since = this.clock() - Date.parse(rec.updatedAt);
    const bound = rec.podId ? this.readyTimeoutMs + READY_CHECK_WAIT_MS + 60_000 : ABANDONED_CREATE_MS;
    if (!(since > bound)) return rec;
    if (rec.podId) await this.terminateQuietly(rec.workspaceId, rec.podId);
    const error = `its start was cut short (nothing has finished it for ${Math.round(since / 1000)} s: the coordinator starting it stopped)`;
    await this.o.repo.setState(
      rec.id,
      { status: "failed", podId: null, agentId: null, error },
      iso(this.clock()),
    );
    this.o.log.warn(
      { workspaceId: rec.workspaceId, database: rec.name },
      "database start cut short: marked failed",
    );
    return { ...rec, status: "failed", podId: null, agentId: null, error };
  }

  /** A running record whose pod ended is failed, with the pod's reason; so is a start nobody finishes. */
  private async reconciled(rec: DatabaseRecord): Promise<DatabaseRecord> {
    if (rec.status === "starting") return this.abandonedStartEnded(rec);
    if (rec.status !== "running" || !rec.podId) return rec;
    let reason: string | null;
    try {
      const pod = await this.o.pods.get(rec.workspaceId, rec.podId);
      if (pod.status !== "terminated") return rec;
      reason = pod.terminatedReason;
    } catch (e) {
      if (!(e instanceof BerthError && e.code === "not_found")) throw e;
      reason = "its pod is gone";
    }
    const error = `its pod ${rec.podId} ended: ${reason ?? "no reason given"}`;
    await this.o.repo.setState(
      rec.id,
      { status: "failed", podId: null, agentId: null, error },
      iso(this.clock()),
    );
    return { ...rec, status: "failed", podId: null, agentId: null, error };
  }

  private async endPod(rec: DatabaseRecord): Promise<void> {
    if (rec.podId) await this.terminateQuietly(rec.workspaceId, rec.podId);
  }

  /** Terminates a pod; one already ended or gone is fine. */
  private async terminateQuietly(workspaceId: string, podId: string): Promise<void> {
    try {
      await this.o.pods.terminate(workspaceId, podId);
    } catch (e) {
      if (e instanceof BerthError && (e.code === "sandbox_terminated" || e.code === "not_found")) return;
      throw e;
    }
  }

  view(r: DatabaseRecord): DatabaseView {
    return {
      id: r.id,
      name: r.name,
      engine: r.engine,
      status: r.status,
      secret_name: r.secretName,
      volume: r.volume,
      host: "127.0.0.1",
      local_port: r.localPort,
      port: enginePort(r.engine),
      pod_id: r.podId,
      agent_id: r.agentId,
      error: r.error,
      created_at: r.createdAt,
      updated_at: r.updatedAt,
    };
  }
}

function exists(name: string): BerthError {
  return new BerthError("conflict", `database ${name} already exists in this workspace`, { name });
}

function podConfig(name: string, cpu: number, memory: number): StubConfig {
  return {
    runtime: { cpu: Math.max(1, Math.ceil(cpu)), gpu: "", memory, image_id: "" },
    handler: "",
    on_start: "",
    python_version: "python3",
    keep_warm_seconds: 0,
    max_pending_tasks: 0,
    callback_url: "",
    task_policy: { max_retries: 0, timeout: 0, expires: "" },
    workers: 1,
    authorized: true,
    volumes: [{ name: databaseVolumeName(name), mount_path: DATA_MOUNT }],
    autoscaler: { type: "queue_depth", max_containers: 1, tasks_per_container: 1 },
  };
}

function podExtra(
  engine: DatabaseEngine,
  secretName: string,
  image: string,
  cpu: number,
  localPort: number,
): SandboxStubExtra {
  return {
    cpu_millicores: Math.round(cpu * 1000),
    gpu_types: [],
    gpu_count: 0,
    retry_for: [],
    image_ref: image,
    code_sha256: "",
    secrets: [secretName],
    headless: false,
    entrypoint: engineEntrypoint(engine, secretName),
    // Its agent dials the server's port from the host, which only exposed ports allow (docs/networking.md).
    ports: [enginePort(engine)],
    database: { local_port: localPort, port: enginePort(engine) },
  };
}
