import type { Kysely, Selectable } from "kysely";
import type { EgressPolicy } from "../../shared/egress.ts";
import {
  type Database,
  QueryShapes,
  type SandboxImageTable,
  type SandboxSnapshotTable,
  type SandboxTable,
} from "../store/index.ts";

export type SandboxKind = "sandbox" | "pod";
export type SandboxStatus = "starting" | "running" | "terminated";

export interface SandboxRecord {
  /** The container id (`ctr-...`). */
  id: string;
  workspaceId: string;
  stubId: string;
  agentId: string;
  kind: SandboxKind;
  status: SandboxStatus;
  /** -1: never expires. */
  ttlSeconds: number;
  lastActiveAt: string;
  /** null when it never expires. */
  expiresAt: string | null;
  ports: number[];
  egress: EgressPolicy;
  imageId: string | null;
  createdAt: string;
  terminatedAt: string | null;
  terminatedReason: string | null;
  /** The container's exit code once it ended on its own (a pod whose entrypoint exits 0 finished); else null. */
  exitCode: number | null;
}

export interface SandboxImageRecord {
  id: string;
  workspaceId: string;
  agentId: string;
  imageRef: string;
  sourceSandboxId: string;
  sizeBytes: number;
  createdAt: string;
}

export interface SandboxSnapshotRecord {
  id: string;
  workspaceId: string;
  agentId: string;
  sourceSandboxId: string;
  stubId: string;
  ports: number[];
  egress: EgressPolicy;
  sizeBytes: number;
  createdAt: string;
}

/** last_active_at + ttl; null for ttl -1. */
export function expiryOf(lastActiveAt: string, ttlSeconds: number): string | null {
  return ttlSeconds < 0 ? null : new Date(Date.parse(lastActiveAt) + ttlSeconds * 1000).toISOString();
}

const toSandbox = (r: Selectable<SandboxTable>): SandboxRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  stubId: r.stub_id,
  agentId: r.agent_id,
  kind: r.kind as SandboxKind,
  status: r.status as SandboxStatus,
  ttlSeconds: Number(r.ttl_seconds),
  lastActiveAt: r.last_active_at,
  expiresAt: r.expires_at,
  ports: JSON.parse(r.ports_json) as number[],
  egress: JSON.parse(r.egress_json) as EgressPolicy,
  imageId: r.image_id,
  createdAt: r.created_at,
  terminatedAt: r.terminated_at,
  terminatedReason: r.terminated_reason,
  exitCode: r.exit_code === null || r.exit_code === undefined ? null : Number(r.exit_code),
});

const toImage = (r: Selectable<SandboxImageTable>): SandboxImageRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  agentId: r.agent_id,
  imageRef: r.image_ref,
  sourceSandboxId: r.source_sandbox_id,
  sizeBytes: Number(r.size_bytes),
  createdAt: r.created_at,
});

const toSnapshot = (r: Selectable<SandboxSnapshotTable>): SandboxSnapshotRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  agentId: r.agent_id,
  sourceSandboxId: r.source_sandbox_id,
  stubId: r.stub_id,
  ports: JSON.parse(r.ports_json) as number[],
  egress: JSON.parse(r.egress_json) as EgressPolicy,
  sizeBytes: Number(r.size_bytes),
  createdAt: r.created_at,
});

export interface NewSandbox {
  id: string;
  workspaceId: string;
  stubId: string;
  agentId: string;
  kind: SandboxKind;
  ttlSeconds: number;
  ports: number[];
  egress: EgressPolicy;
  imageId: string | null;
  /** ISO 8601; also the first last_active_at. */
  at: string;
  /** The API token whose request starts it. @default none (null) */
  tokenId?: string | null;
}

/** Sandbox and pod records, and their snapshots (docs/sandboxes.md). */
export class SandboxRepo {
  // Every call on a sandbox looks its record up: that statement is compiled once (QueryShapes).
  private readonly shapes = new QueryShapes();

  constructor(private readonly db: Kysely<Database>) {}

  /** A new record in state `starting`. */
  async insert(s: NewSandbox): Promise<SandboxRecord> {
    const row: SandboxTable = {
      id: s.id,
      workspace_id: s.workspaceId,
      stub_id: s.stubId,
      agent_id: s.agentId,
      kind: s.kind,
      status: "starting",
      ttl_seconds: s.ttlSeconds,
      last_active_at: s.at,
      expires_at: expiryOf(s.at, s.ttlSeconds),
      ports_json: JSON.stringify(s.ports),
      egress_json: JSON.stringify(s.egress),
      image_id: s.imageId,
      created_at: s.at,
      terminated_at: null,
      terminated_reason: null,
      exit_code: null,
      token_id: s.tokenId ?? null,
    };
    await this.db.insertInto("sandboxes").values(row).execute();
    return toSandbox(row);
  }

  async get(id: string): Promise<SandboxRecord | undefined> {
    const r = await this.db.selectFrom("sandboxes").selectAll().where("id", "=", id).executeTakeFirst();
    return r && toSandbox(r);
  }

  /** The workspace's sandbox; undefined for another workspace's. */
  async find(workspaceId: string, id: string): Promise<SandboxRecord | undefined> {
    const { rows } = await this.shapes.run(this.db, "find sandbox", [id, workspaceId], () =>
      this.db
        .selectFrom("sandboxes")
        .selectAll()
        .where("id", "=", id)
        .where("workspace_id", "=", workspaceId),
    );
    const r = rows[0];
    return r && toSandbox(r);
  }

  async list(
    workspaceId: string,
    opts: { status?: SandboxStatus; limit?: number } = {},
  ): Promise<SandboxRecord[]> {
    let q = this.db
      .selectFrom("sandboxes")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .orderBy("created_at", "desc")
      .orderBy("id", "desc")
      .limit(opts.limit ?? 1000);
    if (opts.status) q = q.where("status", "=", opts.status);
    return (await q.execute()).map(toSandbox);
  }

  /** Running (or starting) sandboxes whose expiry is at or before `at`. */
  async listExpired(at: string, limit = 500): Promise<SandboxRecord[]> {
    const rows = await this.db
      .selectFrom("sandboxes")
      .selectAll()
      .where("status", "in", ["running", "starting"])
      .where("expires_at", "is not", null)
      .where("expires_at", "<=", at)
      .orderBy("expires_at")
      .limit(limit)
      .execute();
    return rows.map(toSandbox);
  }

  /** The agent's sandboxes that are not terminated. */
  async listLive(agentId: string): Promise<SandboxRecord[]> {
    const rows = await this.db
      .selectFrom("sandboxes")
      .selectAll()
      .where("agent_id", "=", agentId)
      .where("status", "!=", "terminated")
      .execute();
    return rows.map(toSandbox);
  }

  /** The agents that hold sandboxes not terminated (the sweep's look at agents that are gone). */
  async liveAgentIds(): Promise<string[]> {
    const rows = await this.db
      .selectFrom("sandboxes")
      .select("agent_id")
      .distinct()
      .where("status", "!=", "terminated")
      .execute();
    return rows.map((r) => r.agent_id);
  }

  /** starting → running; false when it is no longer starting (terminated meanwhile). */
  async markRunning(id: string): Promise<boolean> {
    const r = await this.db
      .updateTable("sandboxes")
      .set({ status: "running" })
      .where("id", "=", id)
      .where("status", "=", "starting")
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Ends a sandbox once: true for the call that did it, false when it was
   * already terminated (or unknown). `exitCode`: its container ended on its own.
   */
  async markTerminated(id: string, at: string, reason: string, exitCode?: number): Promise<boolean> {
    const r = await this.db
      .updateTable("sandboxes")
      .set({
        status: "terminated",
        terminated_at: at,
        terminated_reason: reason,
        expires_at: null,
        exit_code: exitCode ?? null,
      })
      .where("id", "=", id)
      .where("status", "!=", "terminated")
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Records activity: last_active_at and the expiry that follows from the TTL. */
  async touch(id: string, at: string): Promise<SandboxRecord | undefined> {
    const s = await this.get(id);
    if (!s || s.status === "terminated") return undefined;
    if (s.lastActiveAt >= at) return s;
    const expiresAt = expiryOf(at, s.ttlSeconds);
    await this.db
      .updateTable("sandboxes")
      .set({ last_active_at: at, expires_at: expiresAt })
      .where("id", "=", id)
      .where("status", "!=", "terminated")
      .execute();
    return { ...s, lastActiveAt: at, expiresAt };
  }

  /** A new TTL, counted from `at` (the call is activity too). */
  async setTtl(id: string, ttlSeconds: number, at: string): Promise<string | null> {
    const expiresAt = expiryOf(at, ttlSeconds);
    await this.db
      .updateTable("sandboxes")
      .set({ ttl_seconds: ttlSeconds, last_active_at: at, expires_at: expiresAt })
      .where("id", "=", id)
      .execute();
    return expiresAt;
  }

  async setEgress(id: string, egress: EgressPolicy): Promise<void> {
    await this.db
      .updateTable("sandboxes")
      .set({ egress_json: JSON.stringify(egress) })
      .where("id", "=", id)
      .execute();
  }

  async setPorts(id: string, ports: number[]): Promise<void> {
    await this.db
      .updateTable("sandboxes")
      .set({ ports_json: JSON.stringify(ports) })
      .where("id", "=", id)
      .execute();
  }

  // ---- snapshots ----

  async insertImage(i: SandboxImageRecord): Promise<SandboxImageRecord> {
    await this.db
      .insertInto("sandbox_images")
      .values({
        id: i.id,
        workspace_id: i.workspaceId,
        agent_id: i.agentId,
        image_ref: i.imageRef,
        source_sandbox_id: i.sourceSandboxId,
        size_bytes: i.sizeBytes,
        created_at: i.createdAt,
      })
      .execute();
    return i;
  }

  async findImage(workspaceId: string, id: string): Promise<SandboxImageRecord | undefined> {
    const r = await this.db
      .selectFrom("sandbox_images")
      .selectAll()
      .where("id", "=", id)
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    return r && toImage(r);
  }

  async insertSnapshot(s: SandboxSnapshotRecord): Promise<SandboxSnapshotRecord> {
    await this.db
      .insertInto("sandbox_snapshots")
      .values({
        id: s.id,
        workspace_id: s.workspaceId,
        agent_id: s.agentId,
        source_sandbox_id: s.sourceSandboxId,
        stub_id: s.stubId,
        ports_json: JSON.stringify(s.ports),
        egress_json: JSON.stringify(s.egress),
        size_bytes: s.sizeBytes,
        created_at: s.createdAt,
      })
      .execute();
    return s;
  }

  async findSnapshot(workspaceId: string, id: string): Promise<SandboxSnapshotRecord | undefined> {
    const r = await this.db
      .selectFrom("sandbox_snapshots")
      .selectAll()
      .where("id", "=", id)
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    return r && toSnapshot(r);
  }
}
