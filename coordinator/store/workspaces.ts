import type { Kysely } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import { hashSecret, newId, newSecret } from "../../shared/ids.ts";
import type { Database } from "./index.ts";

export interface Workspace {
  id: string;
  externalId: string;
  name: string;
  createdAt: string;
}

export interface TokenRecord {
  id: string;
  workspaceId: string;
  name: string;
  prefix: string;
  admin: boolean;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}

export interface Principal {
  workspace: Workspace;
  token: TokenRecord;
}

/** Workspace tokens look like `bt_<43 chars>`; only their hash is stored. */
export const TOKEN_PREFIX = "bt_";
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
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
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
  constructor(private readonly db: Kysely<Database>) {}

  /** Creates a token; the returned `secret` is the only time it is visible. */
  async create(
    workspaceId: string,
    opts: { name?: string; admin?: boolean } = {},
  ): Promise<{ record: TokenRecord; secret: string }> {
    const secret = newSecret(TOKEN_PREFIX);
    const row = {
      id: newId("tok"),
      workspace_id: workspaceId,
      name: (opts.name ?? "").slice(0, 100),
      token_hash: hashSecret(secret),
      prefix: secret.slice(0, PREFIX_LEN),
      is_admin: opts.admin ? 1 : 0,
      created_at: now(),
      last_used_at: null,
      revoked_at: null,
    };
    await this.db.insertInto("tokens").values(row).execute();
    return { record: toToken(row), secret };
  }

  /** Resolves a presented secret to its workspace, or undefined if unknown or revoked. */
  async authenticate(secret: string): Promise<Principal | undefined> {
    const r = await this.db
      .selectFrom("tokens")
      .innerJoin("workspaces", "workspaces.id", "tokens.workspace_id")
      .selectAll("tokens")
      .select([
        "workspaces.external_id as ws_external_id",
        "workspaces.name as ws_name",
        "workspaces.created_at as ws_created_at",
      ])
      .where("tokens.token_hash", "=", hashSecret(secret))
      .where("tokens.revoked_at", "is", null)
      .executeTakeFirst();
    if (!r) return undefined;
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

  async list(workspaceId: string): Promise<TokenRecord[]> {
    const rows = await this.db
      .selectFrom("tokens")
      .selectAll()
      .where("workspace_id", "=", workspaceId)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map(toToken);
  }

  /** Revokes a token of this workspace; another workspace's token is not found. */
  async revoke(workspaceId: string, id: string): Promise<TokenRecord> {
    const r = await this.db
      .selectFrom("tokens")
      .selectAll()
      .where("id", "=", id)
      .where("workspace_id", "=", workspaceId)
      .executeTakeFirst();
    if (!r) throw new BerthError("not_found", `token ${id} not found`);
    if (r.revoked_at) return toToken(r);
    const revokedAt = now();
    await this.db.updateTable("tokens").set({ revoked_at: revokedAt }).where("id", "=", id).execute();
    return toToken({ ...r, revoked_at: revokedAt });
  }
}
