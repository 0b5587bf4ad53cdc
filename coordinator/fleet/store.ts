import type { Kysely } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import type { HostCapacity } from "../../shared/fleet.ts";
import { hashSecret, newId, newSecret, safeEqual } from "../../shared/ids.ts";
import type { Database } from "../store/index.ts";

const now = () => new Date().toISOString();

/** Join tokens look like `bj_<43 chars>`; they let a host join the cluster. */
export const JOIN_TOKEN_PREFIX = "bj_";

export interface JoinTokenRecord {
  id: string;
  description: string;
  prefix: string;
  createdAt: string;
  revokedAt: string | null;
}

export class JoinTokenRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async create(description = ""): Promise<{ record: JoinTokenRecord; secret: string }> {
    const secret = newSecret(JOIN_TOKEN_PREFIX);
    const row = {
      id: newId("tok"),
      description: description.slice(0, 200),
      token_hash: hashSecret(secret),
      prefix: secret.slice(0, 10),
      created_at: now(),
      revoked_at: null,
    };
    await this.db.insertInto("join_tokens").values(row).execute();
    return { record: this.toRecord(row), secret };
  }

  async verify(secret: string): Promise<boolean> {
    const hash = hashSecret(secret);
    const r = await this.db
      .selectFrom("join_tokens")
      .select("token_hash")
      .where("token_hash", "=", hash)
      .where("revoked_at", "is", null)
      .executeTakeFirst();
    return !!r && safeEqual(r.token_hash, hash);
  }

  async list(): Promise<JoinTokenRecord[]> {
    const rows = await this.db.selectFrom("join_tokens").selectAll().orderBy("created_at").execute();
    return rows.map((r) => this.toRecord(r));
  }

  async revoke(id: string): Promise<void> {
    const r = await this.db
      .updateTable("join_tokens")
      .set({ revoked_at: now() })
      .where("id", "=", id)
      .where("revoked_at", "is", null)
      .executeTakeFirst();
    if (Number(r.numUpdatedRows) === 0) throw new BerthError("not_found", `join token ${id} not found`);
  }

  private toRecord(r: Database["join_tokens"]): JoinTokenRecord {
    return {
      id: r.id,
      description: r.description,
      prefix: r.prefix,
      createdAt: r.created_at,
      revokedAt: r.revoked_at,
    };
  }
}

export type AgentState = "ready" | "lost" | "left";

export interface AgentRecord {
  id: string;
  hostname: string;
  version: string;
  grpcAddress: string;
  joinedAt: string;
  lastSeenAt: string | null;
  state: AgentState;
  capacity: HostCapacity | null;
}

export class AgentRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** Registers a joining host, or re-registers one that joined before under `id`. */
  async upsertJoin(a: {
    id: string;
    hostname: string;
    version: string;
    grpcAddress: string;
  }): Promise<AgentRecord> {
    const existing = await this.get(a.id);
    if (existing) {
      await this.db
        .updateTable("agents")
        .set({ hostname: a.hostname, version: a.version, grpc_address: a.grpcAddress })
        .where("id", "=", a.id)
        .execute();
      return { ...existing, hostname: a.hostname, version: a.version, grpcAddress: a.grpcAddress };
    }
    const row = {
      id: a.id,
      hostname: a.hostname,
      version: a.version,
      grpc_address: a.grpcAddress,
      joined_at: now(),
      last_seen_at: null,
      state: "lost",
      capacity_json: null,
    };
    await this.db.insertInto("agents").values(row).execute();
    return this.toRecord(row);
  }

  async get(id: string): Promise<AgentRecord | undefined> {
    const r = await this.db.selectFrom("agents").selectAll().where("id", "=", id).executeTakeFirst();
    return r && this.toRecord(r);
  }

  async list(): Promise<AgentRecord[]> {
    const rows = await this.db.selectFrom("agents").selectAll().orderBy("joined_at").orderBy("id").execute();
    return rows.map((r) => this.toRecord(r));
  }

  async recordSeen(
    id: string,
    s: {
      state: AgentState;
      lastSeenAt: string;
      capacity?: HostCapacity;
      grpcAddress?: string;
      hostname?: string;
    },
  ): Promise<void> {
    await this.db
      .updateTable("agents")
      .set({
        state: s.state,
        last_seen_at: s.lastSeenAt,
        ...(s.capacity ? { capacity_json: JSON.stringify(s.capacity) } : {}),
        ...(s.grpcAddress ? { grpc_address: s.grpcAddress } : {}),
        ...(s.hostname ? { hostname: s.hostname } : {}),
      })
      .where("id", "=", id)
      .execute();
  }

  async setState(id: string, state: AgentState): Promise<void> {
    await this.db.updateTable("agents").set({ state }).where("id", "=", id).execute();
  }

  private toRecord(r: Database["agents"]): AgentRecord {
    return {
      id: r.id,
      hostname: r.hostname,
      version: r.version,
      grpcAddress: r.grpc_address,
      joinedAt: r.joined_at,
      lastSeenAt: r.last_seen_at,
      state: r.state as AgentState,
      capacity: r.capacity_json ? (JSON.parse(r.capacity_json) as HostCapacity) : null,
    };
  }
}
