// Workspace secrets: environment-variable values stored sealed (seal.ts) in
// the store's `secrets` table. Values go in through create/update and come
// out only through resolve, for a container's environment; listings carry
// names and timestamps.

import type { Kysely } from "kysely";
import { BerthError } from "../../shared/errors.ts";
import type { Database } from "../store/index.ts";
import type { SecretKey } from "./key.ts";
import { open, seal } from "./seal.ts";

export const SECRET_NAME_MAX = 128;
export const SECRET_VALUE_MAX_BYTES = 64 * 1024;
const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** berth sets BERTH_* in every runner container itself. */
const RESERVED_PREFIX = "BERTH_";

export interface SecretInfo {
  name: string;
  createdAt: string;
  updatedAt: string;
}

/** What the HTTP routes, the CLI's server side and the container manager use. */
export interface Secrets {
  /** Fails with `conflict` when the name exists in the workspace. */
  create(workspaceId: string, name: string, value: string): Promise<SecretInfo>;
  /** Fails with `not_found` when there is no such secret. */
  update(workspaceId: string, name: string, value: string): Promise<SecretInfo>;
  /** Names and timestamps, sorted by name; never values. */
  list(workspaceId: string): Promise<SecretInfo[]>;
  /** Fails with `not_found` when there is no such secret. */
  delete(workspaceId: string, name: string): Promise<void>;
  /**
   * The values of `names`, by name. Fails with `not_found` naming every
   * missing secret, or `failed_precondition` naming every secret this
   * coordinator's key cannot open.
   */
  resolve(workspaceId: string, names: readonly string[]): Promise<Record<string, string>>;
}

export interface SecretServiceOptions {
  db: Kysely<Database>;
  key: SecretKey;
  /** @default () => new Date() */
  now?: () => Date;
}

/** Throws invalid_request naming what is wrong with `name`. */
export function checkSecretName(name: unknown): asserts name is string {
  if (typeof name !== "string" || name === "") {
    throw new BerthError("invalid_request", "a secret needs a name", { field: "name" });
  }
  if (name.length > SECRET_NAME_MAX) {
    throw new BerthError(
      "invalid_request",
      `secret name ${JSON.stringify(name.slice(0, 32))}... is ${name.length} characters; at most ${SECRET_NAME_MAX}`,
      { field: "name" },
    );
  }
  if (!NAME_RE.test(name)) {
    throw new BerthError(
      "invalid_request",
      `secret name ${JSON.stringify(name)} is not an environment variable name: use letters, digits and '_', not starting with a digit`,
      { field: "name" },
    );
  }
  if (name.startsWith(RESERVED_PREFIX)) {
    throw new BerthError(
      "invalid_request",
      `secret name ${JSON.stringify(name)} is reserved: berth sets the ${RESERVED_PREFIX}* variables itself`,
      { field: "name" },
    );
  }
}

/** Throws invalid_request when `value` cannot be an environment variable's value. */
export function checkSecretValue(name: string, value: unknown): asserts value is string {
  if (typeof value !== "string") {
    throw new BerthError("invalid_request", `the value of secret ${name} must be a string`, {
      field: "value",
    });
  }
  const bytes = Buffer.from(value, "utf8");
  if (bytes.length > SECRET_VALUE_MAX_BYTES) {
    throw new BerthError(
      "invalid_request",
      `the value of secret ${name} is ${bytes.length} bytes; at most ${SECRET_VALUE_MAX_BYTES} (64 KiB)`,
      { field: "value" },
    );
  }
  // A lone surrogate has no UTF-8 form; it would come back as U+FFFD.
  if (bytes.toString("utf8") !== value) {
    throw new BerthError("invalid_request", `the value of secret ${name} is not valid UTF-8 text`, {
      field: "value",
    });
  }
  if (value.includes("\0")) {
    throw new BerthError(
      "invalid_request",
      `the value of secret ${name} contains a NUL character, which no environment variable can hold`,
      {
        field: "value",
      },
    );
  }
}

const toInfo = (r: { name: string; created_at: string; updated_at: string }): SecretInfo => ({
  name: r.name,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export class SecretService implements Secrets {
  private readonly db: Kysely<Database>;
  private readonly key: SecretKey;
  private readonly now: () => Date;

  constructor(o: SecretServiceOptions) {
    this.db = o.db;
    this.key = o.key;
    this.now = o.now ?? (() => new Date());
  }

  async create(workspaceId: string, name: string, value: string): Promise<SecretInfo> {
    checkSecretName(name);
    checkSecretValue(name, value);
    const at = this.now().toISOString();
    const s = seal(this.key, workspaceId, name, value);
    // The unique (workspace_id, name) decides a race between two creates.
    const r = await this.db
      .insertInto("secrets")
      .values({
        workspace_id: workspaceId,
        name,
        ciphertext: s.ciphertext,
        nonce: s.nonce,
        key_id: s.keyId,
        created_at: at,
        updated_at: at,
      })
      .onConflict((oc) => oc.columns(["workspace_id", "name"]).doNothing())
      .executeTakeFirst();
    if (Number(r.numInsertedOrUpdatedRows ?? 0n) === 0) {
      throw new BerthError(
        "conflict",
        `secret ${name} already exists in this workspace; update it to change its value`,
        { name },
      );
    }
    return { name, createdAt: at, updatedAt: at };
  }

  async update(workspaceId: string, name: string, value: string): Promise<SecretInfo> {
    checkSecretName(name);
    checkSecretValue(name, value);
    const at = this.now().toISOString();
    const s = seal(this.key, workspaceId, name, value);
    const r = await this.db
      .updateTable("secrets")
      .set({ ciphertext: s.ciphertext, nonce: s.nonce, key_id: s.keyId, updated_at: at })
      .where("workspace_id", "=", workspaceId)
      .where("name", "=", name)
      .returning(["name", "created_at", "updated_at"])
      .executeTakeFirst();
    if (!r) throw new BerthError("not_found", `secret ${name} not found`, { name });
    return toInfo(r);
  }

  async list(workspaceId: string): Promise<SecretInfo[]> {
    const rows = await this.db
      .selectFrom("secrets")
      .select(["name", "created_at", "updated_at"])
      .where("workspace_id", "=", workspaceId)
      .orderBy("name")
      .execute();
    return rows.map(toInfo);
  }

  async delete(workspaceId: string, name: string): Promise<void> {
    const r = await this.db
      .deleteFrom("secrets")
      .where("workspace_id", "=", workspaceId)
      .where("name", "=", name)
      .executeTakeFirst();
    if (Number(r.numDeletedRows) === 0)
      throw new BerthError("not_found", `secret ${name} not found`, { name });
  }

  async resolve(workspaceId: string, names: readonly string[]): Promise<Record<string, string>> {
    const wanted = [...new Set(names)];
    if (wanted.length === 0) return {};
    const rows = await this.db
      .selectFrom("secrets")
      .select(["name", "ciphertext", "nonce", "key_id"])
      .where("workspace_id", "=", workspaceId)
      .where("name", "in", wanted)
      .execute();
    const byName = new Map(rows.map((r) => [r.name, r]));
    const missing = wanted.filter((n) => !byName.has(n));
    if (missing.length > 0) {
      throw new BerthError(
        "not_found",
        `${missing.length === 1 ? "secret" : "secrets"} ${missing.join(", ")} not found in this workspace (create with \`berth secret create NAME VALUE\`)`,
        { missing },
      );
    }
    const out: Record<string, string> = {};
    const unreadable: string[] = [];
    for (const name of wanted) {
      const r = byName.get(name);
      const value = r && open(this.key, workspaceId, name, r);
      if (value === undefined) {
        unreadable.push(`${name}${r && r.key_id !== this.key.id ? ` (sealed with key ${r.key_id})` : ""}`);
      } else out[name] = value;
    }
    if (unreadable.length > 0) {
      throw new BerthError(
        "failed_precondition",
        `cannot decrypt ${unreadable.length === 1 ? "secret" : "secrets"} ${unreadable.join(", ")} with this coordinator's key ${this.key.id} (from ${this.key.source}): every coordinator of a store needs the same secrets key`,
        { unreadable: unreadable.map((u) => u.split(" ")[0]) },
      );
    }
    return out;
  }
}
