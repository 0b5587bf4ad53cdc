// Deployments (docs/deployments.md): versions of named stubs, their state,
// what the invocation routers resolve, and the states the container manager
// scales by. Records live in the store; an in-memory copy (DeploymentCache)
// answers the hot paths and is reloaded every few seconds for changes other
// coordinators made.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { hostUrl } from "../endpoints/index.ts";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import type { EventType } from "../events/index.ts";
import type { DeploymentRecord, DeploymentRepo, DeploymentWithStub } from "./store.ts";
import type { StubRecord } from "../tasks/index.ts";
import type { EmitEvent } from "../events/index.ts";
import type { TaskService } from "../tasks/index.ts";
import { checkDeployment, type DeployInput } from "./check.ts";
import { ScalingEvents, type ScalingEvent, type ScalingEventJson } from "./scaling-events.ts";
import { DeploymentCache, type DeploymentStates, latestActiveVersions } from "./states.ts";

/** Spec, Limits: a serve session ends after 10 minutes of inactivity. */
export const SERVE_IDLE_MS = 10 * 60_000;

/** What the service needs of the task service. */
export type DeploymentTasks = Pick<
  TaskService,
  "upsertStub" | "getStub" | "submit" | "queueDepth" | "failPending"
>;

export interface DeploymentServiceDeps {
  repo: DeploymentRepo;
  tasks: DeploymentTasks;
  log: Logger;
  /** The URL clients reach this coordinator at (deployment URLs start with it). */
  baseUrl: string;
  /** Per-deployment host names `{id}.{endpointDomain}` for endpoint, asgi and realtime deployments. */
  endpointDomain?: string;
  /** Scaling events are also published on `berth.events.{workspace}.autoscaler` when given. */
  nats?: NatsConnection;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
  /**
   * Called with a stub id whenever this service changes what its containers
   * should be (deployed, re-synced, stopped, started, deleted): the container
   * manager drops its cached copy and reconciles at once.
   */
  onStubChange?: (stubId: string) => void;
  /** How often the in-memory states are reloaded from the store. @default 5000 */
  refreshIntervalMs?: number;
  /** How often idle serve sessions are looked for. @default 30000 */
  sweepIntervalMs?: number;
  /** @default SERVE_IDLE_MS */
  serveIdleMs?: number;
  /** last_request_at is written at most this often per deployment. @default 5000 */
  touchEveryMs?: number;
  /** Workspace events (coordinator/events WorkspaceEvents.emit): stub.deploy, deployment.*. */
  events?: EmitEvent;
}

export interface Resolved {
  deployment: DeploymentWithStub;
  stub: StubRecord;
}

const URL_PREFIX: Record<string, string> = {
  endpoint: "endpoint",
  asgi: "endpoint",
  realtime: "endpoint",
  taskqueue: "taskqueue",
  // A pod's URL proxies to its first port (coordinator/endpoints/pods.ts).
  pod: "endpoint",
  // A bot's sessions: a websocket at `{url}/session` (coordinator/bots/websocket.ts).
  bot: "bot",
};

export class DeploymentService {
  private readonly repo: DeploymentRepo;
  private readonly tasks: DeploymentTasks;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly onStubChange: (stubId: string) => void;
  private readonly endpointDomain: string | undefined;
  private readonly baseUrl: string;
  private readonly cache = new DeploymentCache();
  private readonly events: ScalingEvents;
  private readonly lastTouched = new Map<string, number>();
  private readonly o: Required<
    Pick<DeploymentServiceDeps, "refreshIntervalMs" | "sweepIntervalMs" | "serveIdleMs" | "touchEveryMs">
  >;
  private refreshing: Promise<void> | undefined;
  private lastRefresh = 0;
  private timers: NodeJS.Timeout[] = [];
  private sweeping: Promise<number> | undefined;
  private readonly emit: EmitEvent;

  constructor(d: DeploymentServiceDeps) {
    this.repo = d.repo;
    this.tasks = d.tasks;
    this.log = d.log;
    this.clock = d.clock ?? Date.now;
    this.onStubChange = d.onStubChange ?? (() => {});
    this.baseUrl = d.baseUrl.replace(/\/+$/, "");
    this.endpointDomain = d.endpointDomain;
    this.events = new ScalingEvents(d.log, d.nats);
    this.emit = d.events ?? (() => {});
    this.o = {
      refreshIntervalMs: d.refreshIntervalMs ?? 5000,
      sweepIntervalMs: d.sweepIntervalMs ?? 30_000,
      serveIdleMs: d.serveIdleMs ?? SERVE_IDLE_MS,
      touchEveryMs: d.touchEveryMs ?? 5000,
    };
  }

  /**
   * Loads the states, then reloads them and sweeps idle serve sessions on
   * timers. (start and stop are a deployment's; these are the service's.)
   */
  async open(): Promise<void> {
    await this.refresh();
    const every = (ms: number, fn: () => Promise<unknown>, what: string) => {
      const t = setInterval(() => {
        fn().catch((e) => this.log.warn({ err: describeError(e) }, what));
      }, ms);
      t.unref();
      this.timers.push(t);
    };
    every(
      this.o.refreshIntervalMs,
      () => this.refresh(),
      "deployments: cannot reload the states; trying again",
    );
    every(
      this.o.sweepIntervalMs,
      () => this.sweepServeSessions(),
      "deployments: cannot sweep serve sessions",
    );
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await Promise.allSettled([this.refreshing, this.sweeping]);
  }

  /** What the container manager scales by (synchronous, from memory). */
  get states(): DeploymentStates {
    return this.cache;
  }

  /**
   * Keeps one container of the deployment running (while it is its name's
   * latest active version) until released: a stack waits for its members to
   * be ready although their min_containers may be 0 (docs/stacks.md).
   */
  holdContainer(d: DeploymentRecord, on: boolean): void {
    this.cache.hold(d.id, on);
    this.onStubChange(d.stubId);
  }

  /** The latest active version of each deployment, and each serve session, from memory (the /v1 gateway's models). */
  activeDeployments(): DeploymentWithStub[] {
    return latestActiveVersions(this.cache.all());
  }

  /** Reloads every deployment from the store (a reload already running is shared). */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      const generation = this.cache.generation;
      const all = await this.repo.listWithStubs();
      // A change made here meanwhile is newer than this read: the next reload takes it.
      this.cache.replaceAll(all, generation);
      this.lastRefresh = this.clock();
    })().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  // ---- records ----

  async deploy(workspaceId: string, input: DeployInput): Promise<DeploymentRecord> {
    const { name, kind, config, extra } = input;
    checkDeployment(input);
    // A bot's transitions run as tasks of function stubs of this workspace (berth deploy makes them first).
    for (const t of kind === "bot" ? (extra.bot?.transitions ?? []) : [])
      if ((await this.tasks.getStub(workspaceId, t.stub_id).catch(() => undefined))?.type !== "function")
        throw invalid(`transition ${t.name}: ${t.stub_id} is not a function stub of this workspace`);
    const at = new Date(this.clock()).toISOString();
    if (input.serve) {
      const { stub } = await this.upsertStub(workspaceId, { name, type: `${kind}/serve`, config, extra });
      const { deployment } = await this.repo.upsertServe(workspaceId, name, kind, stub.id, at);
      this.cache.put({ ...deployment, config: stub.config, extra: stub.extra });
      this.onStubChange(stub.id);
      this.announce("stub.deploy", deployment);
      this.log.info(
        { workspaceId, deploymentId: deployment.id, name, kind },
        "deployments: serve session synced",
      );
      return deployment;
    }
    // The version is taken first, so concurrent deploys never share a version's stub.
    const reserved = await this.repo.reserveVersion(workspaceId, name, kind, at);
    let stub: StubRecord;
    try {
      ({ stub } = await this.upsertStub(workspaceId, {
        name: `${name}/v${reserved.version}`,
        type: `${kind}/deployment`,
        config,
        extra,
      }));
    } catch (e) {
      await this.repo.remove(reserved.id).catch(() => {});
      throw e;
    }
    const deployment = await this.repo.attachStub(reserved.id, stub.id, at);
    this.cache.put({ ...deployment, config: stub.config, extra: stub.extra });
    this.onStubChange(stub.id);
    this.announce("stub.deploy", deployment);
    this.log.info(
      { workspaceId, deploymentId: deployment.id, name, kind, version: deployment.version },
      "deployments: deployed",
    );
    return deployment;
  }

  /** The workspace's deployments, newest first. */
  list(workspaceId: string, o: { name?: string } = {}): Promise<DeploymentRecord[]> {
    return this.repo.list(workspaceId, o.name);
  }

  /** The workspace's deployment; not_found for another workspace's. */
  async get(workspaceId: string, id: string): Promise<DeploymentRecord> {
    const d = await this.repo.get(id);
    if (!d || d.workspaceId !== workspaceId) throw new BerthError("not_found", `deployment ${id} not found`);
    return d;
  }

  /** The name of the deployment that runs stub `stubId`; undefined for a stub no deployment runs. */
  async nameOfStub(workspaceId: string, stubId: string): Promise<string | undefined> {
    return (await this.repo.ofStub(workspaceId, stubId))?.name;
  }

  stop(workspaceId: string, id: string): Promise<DeploymentRecord> {
    return this.setActive(workspaceId, id, false);
  }

  start(workspaceId: string, id: string): Promise<DeploymentRecord> {
    return this.setActive(workspaceId, id, true);
  }

  /** Removes the record: its containers stop and its queued tasks fail. */
  async delete(workspaceId: string, id: string): Promise<void> {
    const d = await this.get(workspaceId, id);
    await this.remove(d, "deleted");
  }

  /** The URL a deployment is called at; "" for kinds that have none (schedules, functions). */
  async url(workspaceId: string | undefined, id: string): Promise<string> {
    const d = workspaceId === undefined ? await this.repo.get(id) : await this.get(workspaceId, id);
    if (!d) throw new BerthError("not_found", `deployment ${id} not found`);
    return this.urlOf(d);
  }

  /**
   * The versioned URL (`/endpoint/{name}/v{N}`), or by id for a serve session
   * and for a deployment callable without a token (a name is only unique in a
   * workspace).
   */
  urlOf(d: DeploymentRecord): string {
    const prefix = URL_PREFIX[d.kind];
    if (!prefix) return "";
    const authorized = this.cache.get(d.id)?.config.authorized ?? true;
    if (d.serve || !authorized) return `${this.baseUrl}/${prefix}/id/${d.id}`;
    return `${this.baseUrl}/${prefix}/${encodeURIComponent(d.name)}/v${d.version}`;
  }

  /** `http://{id}.{endpointDomain}[:port]` for direct-served deployments when a domain is configured. */
  hostUrlOf(d: DeploymentRecord): string | undefined {
    if (!this.endpointDomain || URL_PREFIX[d.kind] !== "endpoint") return undefined;
    return hostUrl(this.baseUrl, this.endpointDomain, d.id);
  }

  /** Notes a request (serve sessions end after 10 idle minutes); written at most every few seconds. */
  async noteRequest(id: string): Promise<void> {
    const now = this.clock();
    if (now - (this.lastTouched.get(id) ?? Number.NEGATIVE_INFINITY) < this.o.touchEveryMs) return;
    this.lastTouched.set(id, now);
    const at = new Date(now).toISOString();
    const cached = this.cache.get(id);
    if (cached) cached.lastRequestAt = at;
    try {
      await this.repo.touch(id, at);
    } catch (e) {
      this.lastTouched.delete(id);
      this.log.warn({ deploymentId: id, err: describeError(e) }, "deployments: cannot record a request");
    }
  }

  // ---- the invocation routers ----

  /**
   * The deployment `/…/{name}[/v{N}]` reaches: version N, or the latest
   * active version. not_found when there is none; deployment_stopped (409)
   * when it (or every version) is stopped.
   */
  async resolveByName(workspaceId: string, name: string, version?: number): Promise<Resolved> {
    let found = this.findByName(workspaceId, name, version);
    if (
      !found.deployment &&
      ((await this.refreshIfStale()) ||
        (await this.takeActiveFromStore(await this.repo.list(workspaceId, name), version)))
    )
      found = this.findByName(workspaceId, name, version);
    const which = version === undefined ? `deployment ${name}` : `deployment ${name} v${version}`;
    if (!found.deployment) {
      if (found.stopped)
        throw new BerthError(
          "deployment_stopped",
          version === undefined
            ? `every version of deployment ${name} is stopped: start one`
            : `${which} is stopped: start it or call another version`,
          { deployment_id: found.stopped.id },
        );
      throw new BerthError("not_found", `${which} not found`);
    }
    return {
      deployment: found.deployment,
      stub: await this.tasks.getStub(workspaceId, found.deployment.stubId),
    };
  }

  /**
   * The deployment with this id in any workspace (`/…/id/{id}`); deployment_stopped when stopped,
   * unless `includeStopped`: a caller that must first check who asks (a stopped deployment's
   * name and state are its workspace's business) refuses it itself, after that check.
   */
  async resolveById(id: string, o: { includeStopped?: boolean } = {}): Promise<Resolved> {
    let d = this.cache.get(id);
    if (
      !d?.active &&
      ((await this.refreshIfStale()) || (await this.takeActiveFromStore([await this.repo.get(id)])))
    )
      d = this.cache.get(id);
    if (!d) throw new BerthError("not_found", `deployment ${id} not found`);
    if (!d.active && !o.includeStopped)
      throw new BerthError("deployment_stopped", `deployment ${d.name} (${id}) is stopped: start it`, {
        deployment_id: id,
      });
    return { deployment: d, stub: await this.tasks.getStub(d.workspaceId, d.stubId) };
  }

  // ---- scaling events ----

  /** Keeps the event for GET /deployment/{ws}/{id} and publishes it (NATS, log). */
  recordScaling(ev: ScalingEvent): void {
    const d = this.cache.byStub(ev.stubId);
    this.events.record(d?.id, ev);
    if (d) {
      const scale = { from: ev.from, to: ev.to, reason: ev.reason, queue_depth: ev.queueDepth };
      this.announce("deployment.scale", d, scale);
    }
  }

  /** The deployment's recent scaling events, oldest first. */
  scalingEvents(id: string): ScalingEventJson[] {
    return this.events.of(id);
  }

  // ---- serve sessions ----

  /** Deletes serve sessions idle for 10 minutes; returns how many. */
  sweepServeSessions(): Promise<number> {
    this.sweeping ??= (async () => {
      const before = new Date(this.clock() - this.o.serveIdleMs).toISOString();
      let n = 0;
      for (const d of await this.repo.idleServeSessions(before)) {
        await this.remove(d, "serve_idle");
        n++;
      }
      return n;
    })().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  // ---- internals ----

  private findByName(
    workspaceId: string,
    name: string,
    version: number | undefined,
  ): { deployment?: DeploymentWithStub; stopped?: DeploymentWithStub } {
    let best: DeploymentWithStub | undefined;
    let stopped: DeploymentWithStub | undefined;
    for (const d of this.cache.all()) {
      if (d.workspaceId !== workspaceId || d.name !== name || d.serve) continue;
      if (version !== undefined && d.version !== version) continue;
      if (!d.active) {
        if (!stopped || d.version > stopped.version) stopped = d;
      } else if (!best || d.version > best.version) best = d;
    }
    return best ? { deployment: best } : stopped ? { stopped } : {};
  }

  /**
   * Reloads when the store holds an active version (of `version`, when given) that memory does not
   * have active: a deploy or start through another coordinator, committed before this request came
   * (the once-a-second reload may have run just before it). One indexed read per miss; a reload only
   * when there is something to take — twice when the first one had begun before that commit.
   */
  private async takeActiveFromStore(
    rows: (DeploymentRecord | undefined)[],
    version?: number,
  ): Promise<boolean> {
    const missing = rows.find(
      (r) => r?.active && (version === undefined || r.version === version) && !this.cache.get(r.id)?.active,
    );
    if (!missing) return false;
    await this.refresh();
    if (!this.cache.get(missing.id)?.active) await this.refresh();
    return true;
  }

  /** Reloads before answering "none" or "stopped", at most once a second (another coordinator may have changed it). */
  private async refreshIfStale(): Promise<boolean> {
    if (this.clock() - this.lastRefresh < 1000 && !this.refreshing) return false;
    await this.refresh();
    return true;
  }

  private async upsertStub(
    workspaceId: string,
    s: { name: string; type: string; config: StubConfig; extra: StubExtra },
  ): Promise<{ stub: StubRecord }> {
    try {
      return await this.tasks.upsertStub(workspaceId, s);
    } catch (e) {
      // The only thing upsertStub finds missing is the code object: a bad request here.
      if (e instanceof BerthError && e.code === "not_found") throw invalid(e.message);
      throw e;
    }
  }

  private announce(type: EventType, d: DeploymentRecord, more: Record<string, unknown> = {}): void {
    const { id, name, kind, version, stubId, active, serve } = d;
    const base = { deployment_id: id, name, kind, version, stub_id: stubId, active, serve };
    this.emit(d.workspaceId, type, id, { ...base, ...more });
  }

  private async setActive(workspaceId: string, id: string, active: boolean): Promise<DeploymentRecord> {
    const was = await this.get(workspaceId, id);
    const at = new Date(this.clock()).toISOString();
    const d = await this.repo.setActive(id, active, at);
    if (!d) throw new BerthError("not_found", `deployment ${id} not found`);
    if (was.active !== active) this.announce(active ? "deployment.start" : "deployment.stop", d);
    const cached = this.cache.get(id);
    if (cached) this.cache.put({ ...cached, ...d });
    else await this.refresh();
    this.log.info(
      { workspaceId, deploymentId: id, name: d.name, version: d.version, active },
      "deployments: state changed",
    );
    return d;
  }

  private async remove(d: DeploymentRecord, reason: "deleted" | "serve_idle"): Promise<void> {
    await this.repo.remove(d.id);
    this.announce("deployment.delete", d, { reason });
    this.cache.remove(d.id);
    this.events.forget(d.id);
    this.lastTouched.delete(d.id);
    const message =
      reason === "deleted"
        ? `deployment ${d.name} was deleted`
        : `serve session ${d.name} ended after ${Math.round(this.o.serveIdleMs / 60_000)} minutes without requests`;
    this.log.info(
      { workspaceId: d.workspaceId, deploymentId: d.id, name: d.name, version: d.version },
      `deployments: ${message}`,
    );
    try {
      await this.tasks.failPending(d.stubId, {
        code: "DeploymentDeleted",
        message: `${message}: the task will not run`,
      });
    } catch (e) {
      this.log.warn(
        { deploymentId: d.id, err: describeError(e) },
        "deployments: cannot fail the queued tasks",
      );
    }
  }
}
