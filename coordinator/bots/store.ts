// Bot sessions (docs/bots.md): the markers in each location of a session, the
// transitions in flight, and the session's history, on SQLite and PostgreSQL.
//
// A transition fires in two steps because its handler runs in a container:
// `take` moves its input markers out of their locations into the session's
// in-flight record (so no other firing can take them), `finish` puts the
// handler's output markers into their locations, `fail` puts the taken markers
// back. Every change is one compare-and-set on the session's version plus one
// history row in the same transaction, so a crash or restart leaves either
// the whole change or none of it.

import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import type { Database } from "../store/index.ts";

/** Marker values are the session's JSON documents of the marker type's fields. */
export type Markers = Record<string, unknown[]>;

export interface InFlight {
  transition: string;
  taken: Markers;
  /** When the markers were taken (ISO 8601). */
  at?: string;
  /** The task running the handler, once submitted (`start`). */
  taskId?: string;
}

export interface BotSessionState {
  /** Location (marker type name) -> its markers, oldest first. */
  locations: Markers;
  /** History seq of the `take` -> what it took, until `finish` or `fail`. */
  inFlight: Record<string, InFlight>;
}

export interface BotSession {
  id: string;
  workspaceId: string;
  botName: string;
  state: BotSessionState;
  version: number;
  createdAt: string;
  updatedAt: string;
}

export type BotEventKind = "created" | "put" | "take" | "start" | "finish" | "fail";

export interface BotSessionEvent {
  seq: number;
  kind: BotEventKind;
  body: Record<string, unknown>;
  at: string;
}

// Concurrent changes of one session (two firings finishing at once) retry the compare-and-set.
const CAS_ATTEMPTS = 8;

export class BotSessionRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** A new session of `botName` with these (empty) locations. */
  async create(workspaceId: string, botName: string, locations: string[]): Promise<BotSession> {
    if (locations.length === 0) throw new BerthError("invalid_request", `bot ${botName} has no locations`);
    const names = new Set(locations);
    if (names.size !== locations.length)
      throw new BerthError("invalid_request", `bot ${botName} names a location twice`);
    const state: BotSessionState = {
      locations: Object.fromEntries(locations.map((l) => [l, []])),
      inFlight: {},
    };
    const now = new Date().toISOString();
    const id = `bs-${randomUUID().replace(/-/g, "")}`;
    await this.db.transaction().execute(async (tx) => {
      await tx
        .insertInto("bot_sessions")
        .values({
          id,
          workspace_id: workspaceId,
          bot_name: botName,
          state: JSON.stringify(state),
          version: 1,
          created_at: now,
          updated_at: now,
        })
        .execute();
      await tx
        .insertInto("bot_session_events")
        .values({ session_id: id, seq: 1, kind: "created", body: JSON.stringify({ locations }), at: now })
        .execute();
    });
    return { id, workspaceId, botName, state, version: 1, createdAt: now, updatedAt: now };
  }

  /** The session, or undefined when it is not this workspace's. */
  async get(workspaceId: string, id: string): Promise<BotSession | undefined> {
    const r = await this.db
      .selectFrom("bot_sessions")
      .selectAll()
      .where("id", "=", id)
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    if (!r) return undefined;
    return {
      id: r.id,
      workspaceId: r.workspace_id,
      botName: r.bot_name,
      state: JSON.parse(r.state) as BotSessionState,
      version: Number(r.version),
      createdAt: r.created_at,
      updatedAt: r.updated_at,
    };
  }

  /** The session's history, oldest first. */
  async history(workspaceId: string, id: string): Promise<BotSessionEvent[]> {
    await this.mustGet(workspaceId, id);
    const rows = await this.db
      .selectFrom("bot_session_events")
      .selectAll()
      .where("session_id", "=", id)
      .orderBy("seq", "asc")
      .execute();
    return rows.map((r) => ({
      seq: Number(r.seq),
      kind: r.kind as BotEventKind,
      body: JSON.parse(r.body) as Record<string, unknown>,
      at: r.at,
    }));
  }

  /** Adds markers to a location (a user's message, for example). */
  async put(workspaceId: string, id: string, location: string, markers: unknown[]): Promise<BotSession> {
    return this.change(workspaceId, id, "put", (s) => {
      const loc = this.location(s, location);
      loc.push(...markers);
      return { location, markers };
    }).then((r) => r.session);
  }

  /**
   * Takes `inputs` (location -> count, oldest markers first) for `transition`;
   * answers the firing's seq (for finish/fail) and the markers taken.
   */
  async take(
    workspaceId: string,
    id: string,
    transition: string,
    inputs: Record<string, number>,
  ): Promise<{ firing: number; taken: Markers; session: BotSession }> {
    let taken: Markers = {};
    const r = await this.change(workspaceId, id, "take", (s, seq) => {
      taken = {};
      for (const [location, count] of Object.entries(inputs)) {
        if (!Number.isInteger(count) || count < 1) {
          throw new BerthError(
            "invalid_request",
            `transition ${transition}: the count of ${location} must be >= 1`,
          );
        }
        const loc = this.location(s, location);
        if (loc.length < count) {
          throw new BerthError(
            "failed_precondition",
            `transition ${transition} needs ${count} ${location} marker(s); the session has ${loc.length}`,
          );
        }
      }
      for (const [location, count] of Object.entries(inputs))
        taken[location] = this.location(s, location).splice(0, count);
      s.inFlight[String(seq)] = { transition, taken, at: new Date().toISOString() };
      return { transition, taken };
    });
    return { firing: r.seq, taken, session: r.session };
  }

  /** Notes the task that runs a firing's handler (a restarted coordinator waits for it). */
  async start(workspaceId: string, id: string, firing: number, taskId: string): Promise<BotSession> {
    return this.change(workspaceId, id, "start", (s) => {
      const f = this.inFlight(s, firing);
      f.taskId = taskId;
      return { firing, transition: f.transition, task_id: taskId };
    }).then((r) => r.session);
  }

  /** Sessions with firings in flight, of every workspace (what a starting coordinator picks up). */
  async withFiringsInFlight(): Promise<BotSession[]> {
    // The state is written by JSON.stringify of one shape: an idle session holds exactly this text.
    const rows = await this.db
      .selectFrom("bot_sessions")
      .select(["id", "workspace_id"])
      .where("state", "not like", '%"inFlight":{}%')
      .execute();
    const out: BotSession[] = [];
    for (const r of rows) {
      const s = await this.get(r.workspace_id, r.id);
      if (s && Object.keys(s.state.inFlight).length > 0) out.push(s);
    }
    return out;
  }

  /** Puts a firing's output markers into their locations. */
  async finish(workspaceId: string, id: string, firing: number, outputs: Markers): Promise<BotSession> {
    return this.change(workspaceId, id, "finish", (s) => {
      const f = this.inFlight(s, firing);
      for (const location of Object.keys(outputs)) this.location(s, location);
      for (const [location, markers] of Object.entries(outputs)) this.location(s, location).push(...markers);
      delete s.inFlight[String(firing)];
      return { firing, transition: f.transition, outputs };
    }).then((r) => r.session);
  }

  /** A firing failed: its taken markers go back to the front of their locations. */
  async fail(workspaceId: string, id: string, firing: number, error: string): Promise<BotSession> {
    return this.change(workspaceId, id, "fail", (s) => {
      const f = this.inFlight(s, firing);
      for (const [location, markers] of Object.entries(f.taken))
        this.location(s, location).unshift(...markers);
      delete s.inFlight[String(firing)];
      return { firing, transition: f.transition, error };
    }).then((r) => r.session);
  }

  private async mustGet(workspaceId: string, id: string): Promise<BotSession> {
    const s = await this.get(workspaceId, id);
    if (!s) throw new BerthError("not_found", `bot session ${id} not found`);
    return s;
  }

  private location(s: BotSessionState, name: string): unknown[] {
    const loc = Object.hasOwn(s.locations, name) ? s.locations[name] : undefined;
    if (!loc) {
      const known = Object.keys(s.locations).join(", ");
      throw new BerthError("invalid_request", `the bot has no location ${name} (its locations: ${known})`);
    }
    return loc;
  }

  private inFlight(s: BotSessionState, firing: number): InFlight {
    const f = s.inFlight[String(firing)];
    if (!f) throw new BerthError("failed_precondition", `firing ${firing} is not in flight in this session`);
    return f;
  }

  /**
   * Applies `edit` to a copy of the state and writes it if nobody changed the
   * session meanwhile (retrying a few times); `edit` gets the new version,
   * which is also the history row's seq, and answers the row's body.
   */
  private async change(
    workspaceId: string,
    id: string,
    kind: BotEventKind,
    edit: (s: BotSessionState, seq: number) => Record<string, unknown>,
  ): Promise<{ session: BotSession; seq: number }> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const current = await this.mustGet(workspaceId, id);
      const state = structuredClone(current.state);
      const seq = current.version + 1;
      const body = edit(state, seq);
      const now = new Date().toISOString();
      const written = await this.db.transaction().execute(async (tx) => {
        const u = await tx
          .updateTable("bot_sessions")
          .set({ state: JSON.stringify(state), version: seq, updated_at: now })
          .where("id", "=", id)
          .where("version", "=", current.version)
          .executeTakeFirst();
        if (Number(u.numUpdatedRows) !== 1) return false;
        await tx
          .insertInto("bot_session_events")
          .values({ session_id: id, seq, kind, body: JSON.stringify(body), at: now })
          .execute();
        return true;
      });
      if (written) return { session: { ...current, state, version: seq, updatedAt: now }, seq };
    }
    throw new BerthError(
      "conflict",
      `bot session ${id} changed ${CAS_ATTEMPTS} times while this change was made; try again`,
    );
  }
}
