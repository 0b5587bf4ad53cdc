import type { Kysely } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import { hashSecret, newId, newSecret } from "../../shared/ids.ts";
import { QueryShapes } from "./db.ts";
import type { Database } from "./index.ts";

export interface Workspace {
  id: string;
  externalId: string;
  name: string;
  createdAt: string;
}

/** A token's role in its workspace (coordinator/http/access.ts says what each may do). */
export type Role = "admin" | "developer" | "runner" | "viewer";

export interface TokenRecord {
  id: string;
  workspaceId: string;
  name: string;
  prefix: string;
  /** The cluster admin capability (fleet, agents, join tokens, workspaces). */
  admin: boolean;
  role: Role;
  /** The deployment names the token is narrowed to; null: every deployment of its workspace. */
  deployments: string[] | null;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
  /** An API token, or a single sign-on session (docs/sso.md). */
  kind: TokenKind;
  /** When a session stops being accepted; null for API tokens. */
  expiresAt: string | null;
  /** The identity provider's user of a session (`sub`); null for API tokens. */
  subject: string | null;
}

export type TokenKind = "token" | "session";

export interface Principal {
  workspace: Workspace;
  token: TokenRecord;
}

/** Workspace tokens look like `bt_<43 chars>`; only their hash is stored. */
export const TOKEN_PREFIX = "bt_";
/** Single sign-on sessions look like `bss_<43 chars>`: a credential the token hook takes like a token. */
export const SESSION_PREFIX = "bss_";
const PREFIX_LEN = 10;

const now = () => new Date().toISOString();

const toWorkspace = (
  r: Pick<Database["workspaces"], "id" | "external_id" | "name" | "created_at">,
): Workspace => ({
  id: r.id,
  externalId: r.external_id,
  name: r.name,
  createdAt: r.created_at,
});

const toToken = (r: Database["tokens"]): TokenRecord => ({
  id: r.id,
  workspaceId: r.workspace_id,
  name: r.name,
  prefix: r.prefix,
  admin: r.is_admin === 1,
  role: r.role as Role,
  deployments: r.deployments === null ? null : (JSON.parse(r.deployments) as string[]),
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
  kind: r.kind === "session" ? "session" : "token",
  expiresAt: r.expires_at,
  subject: r.subject,
});

const NAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;

export class WorkspaceRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async create(name: string): Promise<Workspace> {
    if (!NAME_RE.test(name)) {
      throw new BerthError(
        "invalid_request",
        `workspace name ${JSON.stringify(name)} is invalid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit`,
      );
    }
    if (await this.db.selectFrom("workspaces").select("id").where("name", "=", name).executeTakeFirst()) {
      throw new BerthError("conflict", `a workspace named ${JSON.stringify(name)} already exists`);
    }
    const id = newId("ws");
    const row = { id, external_id: id, name, created_at: now() };
    await this.db.insertInto("workspaces").values(row).execute();
    return toWorkspace(row);
  }

  async get(id: string): Promise<Workspace | undefined> {
    const r = await this.db.selectFrom("workspaces").selectAll().where("id", "=", id).executeTakeFirst();
    return r && toWorkspace(r);
  }

  async byExternalId(externalId: string): Promise<Workspace | undefined> {
    const r = await this.db
      .selectFrom("workspaces")
      .selectAll()
      .where("external_id", "=", externalId)
      .executeTakeFirst();
    return r && toWorkspace(r);
  }

  async list(): Promise<Workspace[]> {
    const rows = await this.db
      .selectFrom("workspaces")
      .selectAll()
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map(toWorkspace);
  }

  /**
   * The workspace's callback signature token, made (randomly) on first need;
   * concurrent first calls agree on one token.
   */
  async signatureToken(id: string): Promise<string> {
    const read = () =>
      this.db.selectFrom("workspaces").select("signature_token").where("id", "=", id).executeTakeFirst();
    const r = await read();
    if (!r) throw new BerthError("not_found", `workspace ${id} not found`);
    if (r.signature_token) return r.signature_token;
    await this.db
      .updateTable("workspaces")
      .set({ signature_token: newSecret("bs_") })
      .where("id", "=", id)
      .where("signature_token", "is", null)
      .execute();
    return (await read())?.signature_token as string;
  }

  async maxContainers(id: string): Promise<number> {
    const r = await this.db
      .selectFrom("workspaces")
      .select("max_containers")
      .where("id", "=", id)
      .executeTakeFirst();
    if (!r) throw new BerthError("not_found", `workspace ${id} not found`);
    return Number(r.max_containers);
  }

  async count(): Promise<number> {
    const r = await this.db
      .selectFrom("workspaces")
      .select((eb) => eb.fn.countAll<number | string>().as("n"))
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }
}

export class TokenRepo {
  private readonly shapes = new QueryShapes();

  constructor(private readonly db: Kysely<Database>) {}

  /** Creates a token; the returned `secret` is the only time it is visible. */
  async create(
    workspaceId: string,
    opts: { name?: string; admin?: boolean; role?: Role; deployments?: string[] } = {},
  ): Promise<{ record: TokenRecord; secret: string }> {
    if (opts.admin && opts.role !== undefined && opts.role !== "admin") {
      throw new BerthError(
        "invalid_request",
        `a cluster admin token is a workspace admin: its role cannot be ${opts.role}`,
      );
    }
    const deployments = opts.deployments === undefined ? null : [...new Set(opts.deployments)];
    if (deployments !== null && deployments.length === 0) {
      throw new BerthError(
        "invalid_request",
        "deployments is empty: name at least one deployment, or leave it out",
      );
    }
    for (const d of deployments ?? []) {
      if (!NAME_RE.test(d))
        throw new BerthError("invalid_request", `deployment name ${JSON.stringify(d)} is invalid`);
    }
    const secret = newSecret(TOKEN_PREFIX);
    const row = {
      id: newId("tok"),
      workspace_id: workspaceId,
      name: (opts.name ?? "").slice(0, 100),
      token_hash: hashSecret(secret),
      prefix: secret.slice(0, PREFIX_LEN),
      is_admin: opts.admin ? 1 : 0,
      role: opts.admin ? "admin" : (opts.role ?? "developer"),
      deployments: deployments === null ? null : JSON.stringify(deployments),
      created_at: now(),
      last_used_at: null,
      revoked_at: null,
      kind: "token",
      expires_at: null,
      subject: null,
    };
    await this.db.insertInto("tokens").values(row).execute();
    return { record: toToken(row), secret };
  }

  /**
   * Creates a single sign-on session: a credential of `role` in the
   * workspace for the provider's user `subject`, accepted until `expiresAt`.
   * Like a token, only its hash is stored and the secret is returned once.
   */
  async createSession(
    workspaceId: string,
    o: { name: string; role: Role; subject: string; expiresAt: Date },
  ): Promise<{ record: TokenRecord; secret: string }> {
    const secret = newSecret(SESSION_PREFIX);
    const row = {
      id: newId("ses"),
      workspace_id: workspaceId,
      name: o.name.slice(0, 100),
      token_hash: hashSecret(secret),
      prefix: secret.slice(0, PREFIX_LEN),
      is_admin: 0,
      role: o.role,
      deployments: null,
      created_at: now(),
      last_used_at: null,
      revoked_at: null,
      kind: "session",
      expires_at: o.expiresAt.toISOString(),
      subject: o.subject.slice(0, 255),
    };
    await this.db.insertInto("tokens").values(row).execute();
    return { record: toToken(row), secret };
  }

  /** Resolves a presented secret to its workspace, or undefined if unknown or revoked. */
  async authenticate(secret: string): Promise<Principal | undefined> {
    // Every request makes this lookup: its statement is compiled once (QueryShapes).
    const hash = hashSecret(secret);
    const { rows } = await this.shapes.run(this.db, "authenticate", [hash], () =>
      this.db
        .selectFrom("tokens")
        .innerJoin("workspaces", "workspaces.id", "tokens.workspace_id")
        .selectAll("tokens")
        .select([
          "workspaces.external_id as ws_external_id",
          "workspaces.name as ws_name",
          "workspaces.created_at as ws_created_at",
        ])
        .where("tokens.token_hash", "=", hash)
        .where("tokens.revoked_at", "is", null),
    );
    const r = rows[0];
    if (!r) return undefined;
    // An expired session is refused like a revoked token (ISO 8601 UTC strings compare in time order).
    if (r.expires_at !== null && r.expires_at <= now()) return undefined;
    return {
      token: toToken(r),
      workspace: {
        id: r.workspace_id,
        externalId: r.ws_external_id,
        name: r.ws_name,
        createdAt: r.ws_created_at,
      },
    };
  }

  async touch(id: string): Promise<void> {
    await this.db.updateTable("tokens").set({ last_used_at: now() }).where("id", "=", id).execute();
  }

  /** The workspace's API tokens, or with `kind: "session"` its single sign-on sessions. */
  async list(workspaceId: string, o: { kind?: TokenKind } = {}): Promise<TokenRecord[]> {
    const rows = await this.db
      .selectFrom("tokens")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .where("kind", "=", o.kind ?? "token")
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map(toToken);
  }

  /**
   * Revokes a token of this workspace; another workspace's token is not found.
   * Only an admin caller may revoke an admin token: otherwise any user of a
   * workspace could cut the operator's access off (a cluster admin's token
   * needs a cluster admin, a workspace admin's a workspace admin).
   */
  async revoke(workspaceId: string, id: string, by: { admin: boolean; role?: Role }): Promise<TokenRecord> {
    const r = await this.db
      .selectFrom("tokens")
      .selectAll()
      .where("id", "=", id)
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    if (!r) throw new BerthError("not_found", `token ${id} not found`);
    const byRole = by.role ?? (by.admin ? "admin" : "developer");
    if ((r.is_admin && !by.admin) || (r.role === "admin" && byRole !== "admin")) {
      throw new BerthError(
        "permission_denied",
        `token ${id} is an admin token; only an admin token can revoke it`,
      );
    }
    return this.markRevoked(r);
  }

  /** One session of this workspace (any state); another workspace's, or an API token, is not found. */
  async session(workspaceId: string, id: string): Promise<TokenRecord> {
    return toToken(await this.sessionRow(workspaceId, id));
  }

  /** Revokes a session of this workspace (the caller's right to is the route's check); idempotent. */
  async revokeSession(workspaceId: string, id: string): Promise<TokenRecord> {
    return this.markRevoked(await this.sessionRow(workspaceId, id));
  }

  private async sessionRow(workspaceId: string, id: string) {
    const r = await this.db
      .selectFrom("tokens")
      .selectAll()
      .where("id", "=", id)
      .where("workspace_id", "=", workspaceId)
      .where("kind", "=", "session")
      .executeTakeFirst();
    if (!r) throw new BerthError("not_found", `session ${id} not found`);
    return r;
  }

  private async markRevoked(r: Database["tokens"]): Promise<TokenRecord> {
    if (r.revoked_at) return toToken(r);
    const revokedAt = now();
    await this.db.updateTable("tokens").set({ revoked_at: revokedAt }).where("id", "=", r.id).execute();
    return toToken({ ...r, revoked_at: revokedAt });
  }
}
