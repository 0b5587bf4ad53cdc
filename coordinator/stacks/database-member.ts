// The `database` member kind (docs/stacks.md): a managed PostgreSQL or Redis
// of the workspace, made by the database service (docs/databases.md) exactly
// as `berth db create` makes one.
//
// A database has no versions: its data is what matters. Applying the member
// creates the database when the workspace has none of that name (the
// service answers once it is ready), and otherwise uses the one there
// (started if stopped); its engine, cpu and memory cannot change in place (a
// change fails the attempt, naming the field). Ready: its status is running.
// Rollback: a database this attempt created is deleted with its data (it
// held nothing before the attempt); one that existed before is left as it
// is. A member that leaves the stack is stopped; its data and secret are kept.

import { BerthError, invalid } from "../../shared/errors.ts";
import { checkDatabaseName, checkEngine, type DatabaseService } from "../databases/index.ts";
import type { MemberKind, MemberOutcome, MemberSpec, Readiness } from "./members.ts";

export interface DatabaseMemberSpec extends MemberSpec {
  kind: "database";
  engine: "postgres" | "redis";
  /** CPU cores of its pod, when it is created. @default 1 */
  cpu?: number;
  /** Memory of its pod in MiB, when it is created. @default 1024 */
  memory?: number;
}

const FIELDS = new Set(["kind", "name", "engine", "cpu", "memory"]);

export class DatabaseMembers implements MemberKind {
  readonly kind = "database";
  /** Before the deployments, which may use it from their first start. */
  readonly order = 0;

  constructor(
    private readonly databases: Pick<DatabaseService, "create" | "get" | "start" | "stop" | "delete">,
  ) {}

  check(spec: MemberSpec): void {
    for (const k of Object.keys(spec))
      if (!FIELDS.has(k))
        throw invalid(`${k} is not a field of a database member (kind, name, engine, cpu, memory)`);
    checkDatabaseName(spec.name);
    checkEngine(spec.engine);
    for (const k of ["cpu", "memory"] as const)
      if (spec[k] !== undefined && (typeof spec[k] !== "number" || !Number.isFinite(spec[k])))
        throw invalid(`${k} must be a number`);
  }

  async apply(
    workspaceId: string,
    spec: MemberSpec,
    previous?: MemberSpec,
  ): Promise<{ ref: string; version: number | null; existed?: boolean }> {
    const s = spec as DatabaseMemberSpec;
    if (previous) {
      for (const k of ["engine", "cpu", "memory"] as const)
        if (previous[k] !== s[k])
          throw invalid(
            `the database ${s.name} cannot change its ${k} in place (${JSON.stringify(previous[k] ?? null)} -> ${JSON.stringify(s[k] ?? null)}): keep it, or give the new database another name`,
          );
    }
    const existing = await this.databases.get(workspaceId, s.name).catch((e) => {
      if (e instanceof BerthError && e.code === "not_found") return undefined;
      throw e;
    });
    if (existing) {
      if (existing.engine !== s.engine)
        throw invalid(`the workspace's database ${s.name} is ${existing.engine}, not ${s.engine}`);
      const started =
        existing.status === "running" ? existing : await this.databases.start(workspaceId, s.name);
      return { ref: started.id, version: null, existed: true };
    }
    const made = await this.databases.create(workspaceId, {
      engine: s.engine,
      name: s.name,
      ...(s.cpu !== undefined ? { cpu: s.cpu } : {}),
      ...(s.memory !== undefined ? { memory: s.memory } : {}),
    });
    return { ref: made.id, version: null };
  }

  async readiness(workspaceId: string, o: MemberOutcome): Promise<Readiness> {
    const db = await this.databases.get(workspaceId, o.name);
    if (db.id !== o.ref)
      return { ready: false, failed: `the database ${o.name} was deleted and made again meanwhile` };
    if (db.status === "running") return { ready: true };
    if (db.status === "failed") return { ready: false, failed: `the database does not start: ${db.error}` };
    if (db.status === "stopped") return { ready: false, failed: "the database was stopped meanwhile" };
    return { ready: false };
  }

  async settle(): Promise<void> {}

  async rollback(workspaceId: string, o: MemberOutcome): Promise<void> {
    // One that existed before the attempt keeps its data, whatever the attempt did.
    if (o.previous || !o.ref) return;
    await this.databases.delete(workspaceId, o.name, { deleteData: true }).catch((e) => {
      if (!(e instanceof BerthError && e.code === "not_found")) throw e;
    });
  }

  async retire(workspaceId: string, o: MemberOutcome): Promise<void> {
    await this.databases.stop(workspaceId, o.name).catch((e) => {
      if (!(e instanceof BerthError && e.code === "not_found")) throw e;
    });
  }
}
