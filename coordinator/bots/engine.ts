// Bot sessions at work (docs/bots.md): a session's user puts markers into a
// location; whenever a transition's inputs are there, the engine takes them
// (store: `take`), runs the handler as a task of the transition's function
// stub (`start` notes the task id), and puts the markers it returns into
// their locations (`finish`) or gives the taken ones back (`fail`). Every step
// is in the store first, so a restarted coordinator picks up the firings in
// flight (resume) and a reconnecting client finds the session as it was.

import type { Logger } from "pino";
import { type BotDefinition, type BotTransitionDef, checkBotDefinition } from "../../shared/bots.ts";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import type { BotSession, BotSessionEvent, BotSessionRepo, Markers } from "./store.ts";
import type { TaskRecord } from "../tasks/index.ts";
import type { TaskService, TaskUpdate } from "../tasks/index.ts";
import { isTerminal } from "../tasks/index.ts";
import type { BotEventBus } from "./event-bus.ts";

/** The bot a session runs, as the deployments resolve it (latest active version by name). */
export interface ResolvedBot {
  deploymentId: string;
  name: string;
  authorized: boolean;
  def: BotDefinition;
}

export interface BotDirectory {
  byName(workspaceId: string, name: string): Promise<ResolvedBot>;
}

export type BotTasks = Pick<TaskService, "submit" | "watch" | "getTask">;

/** What a session's websocket hears (docs/bots.md, "Events"). */
export type BotSessionMessage =
  | { type: "markers"; session_id: string; location: string; markers: unknown[]; version: number }
  | {
      type: "transition";
      session_id: string;
      firing: number;
      transition: string;
      state: "started" | "finished" | "failed";
      task_id?: string;
      error?: string;
      version: number;
    };

/** A session as its user sees it: only exposed locations. */
export interface BotSessionView {
  id: string;
  bot: string;
  version: number;
  locations: Record<string, unknown[]>;
  in_flight: { firing: number; transition: string; task_id: string | null }[];
  created_at: string;
  updated_at: string;
}

/** Markers per push, and the size of one marker's JSON. */
export const MAX_MARKERS_PER_PUSH = 1000;
const MAX_MARKER_JSON = 1024 * 1024;
/** A firing taken but never submitted (its coordinator died between the two) is given back after this. */
const UNSUBMITTED_AFTER_MS = 60_000;
/**
 * A firing whose task ended this long ago and is still in flight lost its
 * follower (the coordinator that submitted it died): the sweep settles it.
 * Its follower settles it within milliseconds when alive.
 */
export const UNSETTLED_AFTER_MS = 10_000;

export interface BotEngineDeps {
  sessions: BotSessionRepo;
  bots: BotDirectory;
  tasks: BotTasks;
  log: Logger;
  /** Every coordinator's session messages (several coordinators); without it, this engine's only. */
  bus?: BotEventBus;
  clock?: () => number;
}

export class BotEngine {
  private readonly listeners = new Map<string, Set<(m: BotSessionMessage) => void>>();
  /** Firings this process waits for, `${session}/${firing}` -> its unwatch. */
  private readonly watching = new Map<string, () => void>();
  /** One firing pass per session at a time (the store's compare-and-set keeps several correct; this keeps them few). */
  private readonly passes = new Map<string, Promise<void>>();
  private readonly clock: () => number;
  private closed = false;
  private readonly unlisten: (() => void) | undefined;

  constructor(private readonly d: BotEngineDeps) {
    this.clock = d.clock ?? Date.now;
    this.unlisten = d.bus?.listen((id, m) => this.deliver(id, m));
  }

  /** Picks up the firings in flight that a stopped coordinator left (call once the task service runs). */
  async resume(): Promise<number> {
    let n = 0;
    for (const s of await this.d.sessions.withFiringsInFlight()) {
      for (const [key, f] of Object.entries(s.state.inFlight)) {
        const firing = Number(key);
        if (f.taskId) {
          this.follow(s.workspaceId, s.id, firing, f.transition, f.taskId);
          n++;
        } else await this.giveBackUnsubmitted(s.workspaceId, s.id, firing, f);
      }
    }
    return n;
  }

  /**
   * What a coordinator that died left behind while this one runs (every
   * coordinator calls it on a timer): a firing whose task ended over
   * UNSETTLED_AFTER_MS ago is settled here, one never submitted is given back
   * after UNSUBMITTED_AFTER_MS. The store's compare-and-set settles each
   * firing once, whichever coordinator gets there first. Answers how many it
   * settled or gave back.
   */
  async sweep(): Promise<number> {
    let n = 0;
    for (const s of await this.d.sessions.withFiringsInFlight()) {
      for (const [key, f] of Object.entries(s.state.inFlight)) {
        const firing = Number(key);
        if (this.closed || this.watching.has(`${s.id}/${firing}`)) continue;
        if (!f.taskId) {
          if (await this.giveBackUnsubmitted(s.workspaceId, s.id, firing, f)) n++;
          continue;
        }
        const t = await this.d.tasks.getTask(s.workspaceId, f.taskId).catch(() => undefined);
        if (!t || !isTerminal(t.status)) continue;
        const ended = Date.parse(t.endedAt ?? t.updatedAt);
        if (this.clock() - ended < UNSETTLED_AFTER_MS) continue;
        await this.settle(s.workspaceId, s.id, firing, f.transition, f.taskId, t).then(
          () => n++,
          (e) => this.settleFailed(s.id, firing, e),
        );
      }
    }
    return n;
  }

  private async giveBackUnsubmitted(
    workspaceId: string,
    id: string,
    firing: number,
    f: { transition: string; at?: string },
  ): Promise<boolean> {
    if (f.at && this.clock() - Date.parse(f.at) <= UNSUBMITTED_AFTER_MS) return false;
    await this.giveBack(
      workspaceId,
      id,
      firing,
      f.transition,
      "its task was never submitted (the coordinator stopped)",
    ).catch((e) => this.settleFailed(id, firing, e));
    return true;
  }

  /** Another coordinator settled the firing first (the store refused the second): nothing to say. */
  private settleFailed(id: string, firing: number, e: unknown): void {
    if (e instanceof BerthError && e.code === "failed_precondition") return;
    this.d.log.warn({ sessionId: id, firing, err: describeError(e) }, "bots: cannot settle a firing");
  }

  close(): void {
    this.closed = true;
    this.unlisten?.();
    for (const unwatch of this.watching.values()) unwatch();
    this.watching.clear();
    this.listeners.clear();
  }

  /** A new session of the bot `name` (its latest active version). */
  async create(workspaceId: string, name: string): Promise<BotSession> {
    const bot = await this.d.bots.byName(workspaceId, name);
    return this.d.sessions.create(
      workspaceId,
      bot.name,
      bot.def.locations.map((l) => l.marker),
    );
  }

  async get(workspaceId: string, id: string): Promise<BotSession> {
    const s = await this.d.sessions.get(workspaceId, id);
    if (!s) throw new BerthError("not_found", `bot session ${id} not found`);
    return s;
  }

  history(workspaceId: string, id: string): Promise<BotSessionEvent[]> {
    return this.d.sessions.history(workspaceId, id);
  }

  /** The session as its user sees it (exposed locations only). */
  async view(workspaceId: string, id: string): Promise<BotSessionView> {
    const s = await this.get(workspaceId, id);
    const bot = await this.d.bots.byName(workspaceId, s.botName);
    return viewOf(s, exposedOf(bot.def));
  }

  /**
   * Adds markers (JSON objects of the marker type's fields) to a location and
   * fires what they enable. `userFacing`: only exposed locations are reachable.
   */
  async push(
    workspaceId: string,
    id: string,
    location: string,
    markers: unknown[],
    o: { userFacing?: boolean } = {},
  ): Promise<BotSession> {
    const s = await this.get(workspaceId, id);
    const bot = await this.d.bots.byName(workspaceId, s.botName);
    const loc = bot.def.locations.find((l) => l.marker === location);
    if (!loc || (o.userFacing && !loc.expose)) {
      const names = bot.def.locations.filter((l) => !o.userFacing || l.expose).map((l) => l.marker);
      throw invalid(`the bot ${bot.name} has no location ${location} (its locations: ${names.join(", ")})`);
    }
    checkMarkers(location, markers);
    const after = await this.d.sessions.put(workspaceId, id, location, markers);
    if (loc.expose)
      this.emit(id, { type: "markers", session_id: id, location, markers, version: after.version });
    await this.fire(workspaceId, id);
    return (await this.d.sessions.get(workspaceId, id)) ?? after;
  }

  /** Hears the session's messages until the returned function is called. */
  subscribe(id: string, fn: (m: BotSessionMessage) => void): () => void {
    const set = this.listeners.get(id) ?? new Set();
    this.listeners.set(id, set);
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.listeners.get(id) === set) this.listeners.delete(id);
    };
  }

  /** Fires every transition whose inputs the session holds (one pass per session at a time). */
  fire(workspaceId: string, id: string): Promise<void> {
    const before = this.passes.get(id) ?? Promise.resolve();
    const pass = before
      .then(() => this.firePass(workspaceId, id))
      .catch((e) => this.d.log.warn({ sessionId: id, err: describeError(e) }, "bots: cannot fire"))
      .finally(() => {
        if (this.passes.get(id) === pass) this.passes.delete(id);
      });
    this.passes.set(id, pass);
    return pass;
  }

  private async firePass(workspaceId: string, id: string): Promise<void> {
    if (this.closed) return;
    let s = await this.get(workspaceId, id);
    const bot = await this.d.bots.byName(workspaceId, s.botName);
    for (const t of bot.def.transitions) {
      while (enabled(s, t)) {
        const taken = await this.d.sessions.take(workspaceId, id, t.name, t.inputs);
        s = taken.session;
        let taskId: string;
        try {
          const payload = {
            session: { id, bot: bot.name, model: bot.def.model, firing: taken.firing },
            inputs: taken.taken,
          };
          [taskId] = (await this.d.tasks.submit(
            workspaceId,
            t.stub_id,
            [Buffer.from(JSON.stringify(payload))],
            {
              payloadFormat: "json",
            },
          )) as [string];
        } catch (e) {
          await this.giveBack(
            workspaceId,
            id,
            taken.firing,
            t.name,
            `cannot start its task: ${describeError(e)}`,
          );
          return;
        }
        s = await this.d.sessions.start(workspaceId, id, taken.firing, taskId);
        this.emit(id, {
          type: "transition",
          session_id: id,
          firing: taken.firing,
          transition: t.name,
          state: "started",
          task_id: taskId,
          version: s.version,
        });
        this.follow(workspaceId, id, taken.firing, t.name, taskId);
      }
    }
  }

  /** Waits for the firing's task; its end is applied once, whichever of the watch and the read sees it first. */
  private follow(workspaceId: string, id: string, firing: number, transition: string, taskId: string): void {
    const key = `${id}/${firing}`;
    if (this.watching.has(key)) return;
    let done = false;
    const end = (t: Pick<TaskRecord, "status" | "resultJson" | "error">) => {
      if (done || this.closed) return;
      done = true;
      this.watching.get(key)?.();
      this.watching.delete(key);
      void this.settle(workspaceId, id, firing, transition, taskId, t).catch((e) =>
        this.settleFailed(id, firing, e),
      );
    };
    const unwatch = this.d.tasks.watch([taskId], (u: TaskUpdate) => {
      if (u.type === "result") end({ status: u.status, resultJson: u.resultJson, error: u.error });
    });
    this.watching.set(key, unwatch);
    void this.d.tasks
      .getTask(workspaceId, taskId)
      .then((t) => {
        if (isTerminal(t.status)) end(t);
      })
      .catch((e) => {
        if (e instanceof BerthError && e.code === "not_found")
          end({
            status: "FAILED",
            resultJson: null,
            error: { type: "TaskLost", message: `task ${taskId} is gone`, traceback: "" },
          });
      });
  }

  private async settle(
    workspaceId: string,
    id: string,
    firing: number,
    transition: string,
    taskId: string,
    t: Pick<TaskRecord, "status" | "resultJson" | "error">,
  ): Promise<void> {
    if (t.status !== "COMPLETE") {
      const why = t.error ? `${t.error.type}: ${t.error.message}` : `its task ended ${t.status}`;
      await this.giveBack(workspaceId, id, firing, transition, why, taskId);
      return;
    }
    let outputs: Markers;
    try {
      outputs = outputsOf(transition, t.resultJson, await this.definition(workspaceId, id));
    } catch (e) {
      await this.giveBack(workspaceId, id, firing, transition, describeError(e), taskId);
      return;
    }
    const s = await this.d.sessions.finish(workspaceId, id, firing, outputs);
    const exposed = exposedOf(await this.definition(workspaceId, id));
    this.emit(id, {
      type: "transition",
      session_id: id,
      firing,
      transition,
      state: "finished",
      task_id: taskId,
      version: s.version,
    });
    for (const [location, markers] of Object.entries(outputs))
      if (exposed.has(location) && markers.length > 0)
        this.emit(id, { type: "markers", session_id: id, location, markers, version: s.version });
    await this.fire(workspaceId, id);
  }

  /** A failed firing's markers go back; it is not fired again until the session changes (no loop on a bad handler). */
  private async giveBack(
    workspaceId: string,
    id: string,
    firing: number,
    transition: string,
    error: string,
    taskId?: string,
  ): Promise<void> {
    const s = await this.d.sessions.fail(workspaceId, id, firing, error);
    this.emit(id, {
      type: "transition",
      session_id: id,
      firing,
      transition,
      state: "failed",
      ...(taskId ? { task_id: taskId } : {}),
      error,
      version: s.version,
    });
  }

  private async definition(workspaceId: string, id: string): Promise<BotDefinition> {
    const s = await this.get(workspaceId, id);
    return (await this.d.bots.byName(workspaceId, s.botName)).def;
  }

  private emit(id: string, m: BotSessionMessage): void {
    if (this.d.bus) this.d.bus.publish(id, m);
    else this.deliver(id, m);
  }

  /** A session message (this engine's, or through the bus another coordinator's) to its local listeners. */
  private deliver(id: string, m: BotSessionMessage): void {
    for (const fn of this.listeners.get(id) ?? []) {
      try {
        fn(m);
      } catch (e) {
        this.d.log.warn({ sessionId: id, err: describeError(e) }, "bots: a session listener failed");
      }
    }
  }
}

/** The deployment's stub extra as a checked bot definition. */
export function botDefinitionOf(extra: { bot?: BotDefinition }): BotDefinition {
  checkBotDefinition(extra.bot);
  return extra.bot;
}

export function viewOf(s: BotSession, exposed: Set<string>): BotSessionView {
  return {
    id: s.id,
    bot: s.botName,
    version: s.version,
    locations: Object.fromEntries(Object.entries(s.state.locations).filter(([l]) => exposed.has(l))),
    in_flight: Object.entries(s.state.inFlight).map(([k, f]) => ({
      firing: Number(k),
      transition: f.transition,
      task_id: f.taskId ?? null,
    })),
    created_at: s.createdAt,
    updated_at: s.updatedAt,
  };
}

const exposedOf = (def: BotDefinition) => new Set(def.locations.filter((l) => l.expose).map((l) => l.marker));

function enabled(s: BotSession, t: BotTransitionDef): boolean {
  return Object.entries(t.inputs).every(([loc, n]) => (s.state.locations[loc]?.length ?? 0) >= n);
}

function checkMarkers(location: string, markers: unknown[]): void {
  if (!Array.isArray(markers) || markers.length === 0 || markers.length > MAX_MARKERS_PER_PUSH)
    throw invalid(`markers must be a list of 1 to ${MAX_MARKERS_PER_PUSH} ${location} objects`);
  for (const m of markers) {
    if (!m || typeof m !== "object" || Array.isArray(m))
      throw invalid(
        `a ${location} marker is a JSON object of its fields, not ${JSON.stringify(m)?.slice(0, 100)}`,
      );
    if (JSON.stringify(m).length > MAX_MARKER_JSON)
      throw invalid(`a ${location} marker is over ${MAX_MARKER_JSON / 1024 / 1024} MiB of JSON`);
  }
}

/** The handler's answer (marker type name -> JSON documents), checked against the transition's outputs. */
function outputsOf(transition: string, resultJson: string | null, def: BotDefinition): Markers {
  const t = def.transitions.find((x) => x.name === transition);
  if (!t) throw invalid(`the bot no longer has the transition ${transition}`);
  if (resultJson === null) throw invalid(`transition ${transition} returned no JSON answer (over 1 MiB?)`);
  const value = JSON.parse(resultJson) as unknown;
  if (!value || typeof value !== "object" || Array.isArray(value))
    throw invalid(`transition ${transition} answered ${resultJson.slice(0, 100)}, not marker lists by type`);
  const out: Markers = {};
  for (const [k, v] of Object.entries(value)) {
    if (!t.outputs.includes(k))
      throw invalid(`transition ${transition} returned ${k} markers, not among its outputs`);
    if (!Array.isArray(v)) throw invalid(`transition ${transition} returned ${k}: not a list`);
    out[k] = v;
  }
  return out;
}
