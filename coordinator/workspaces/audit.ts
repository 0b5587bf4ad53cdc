// The audit trail (docs/roles.md): every change made through the API, with
// who made it, from where, what it was about and how it ended. The token hook
// (coordinator/http/changes.ts) hands each change here; it is stored
// (append-only: this module inserts and reads, nothing updates or deletes a
// row) and published as an `audit.change` event, which webhooks deliver as
// a signed CloudEvent like every other event.

import type { Kysely } from "kysely";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import { newId } from "../../shared/ids.ts";
import type { Change, ChangeRecorder, CursorKey } from "../http/index.ts";
import type { Database } from "../store/index.ts";

export interface AuditRecord {
  id: string;
  at: string;
  token: { id: string; name: string; role: string; clusterAdmin: boolean };
  clientIp: string;
  userAgent: string;
  action: string;
  method: string;
  route: string;
  objectId: string | null;
  status: number;
  outcome: string;
  errorCode: string | null;
}

/** Where audit events go (the workspace event stream). */
export interface AuditEventSink {
  publish(ev: {
    type: "audit.change";
    workspaceId: string;
    workspaceExternalId: string;
    subject: string;
    time: string;
    data: Record<string, unknown>;
  }): void;
}

type Row = Database["audit_log"];

const toRecord = (r: Row): AuditRecord => ({
  id: r.id,
  at: r.at,
  token: { id: r.token_id, name: r.token_name, role: r.role, clusterAdmin: r.cluster_admin === 1 },
  clientIp: r.client_ip,
  userAgent: r.user_agent,
  action: r.action,
  method: r.method,
  route: r.route,
  objectId: r.object_id,
  status: r.status,
  outcome: r.outcome,
  errorCode: r.error_code,
});

/** The JSON of a record: the audit route's items and the `audit.change` event's data. */
export const auditJson = (a: AuditRecord) => ({
  id: a.id,
  at: a.at,
  token: { id: a.token.id, name: a.token.name, role: a.token.role, cluster_admin: a.token.clusterAdmin },
  client_ip: a.clientIp,
  user_agent: a.userAgent,
  action: a.action,
  method: a.method,
  route: a.route,
  object_id: a.objectId,
  status: a.status,
  outcome: a.outcome,
  error_code: a.errorCode,
});

export class AuditTrail implements ChangeRecorder {
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly d: { db: Kysely<Database>; events?: AuditEventSink; log: Logger }) {}

  /** Stores the change and publishes its event; a failure is logged, never thrown at the request. */
  record(c: Change): Promise<void> {
    const t = c.principal.token;
    const row: Row = {
      id: newId("aud"),
      workspace_id: c.principal.workspace.id,
      at: c.at,
      token_id: t.id,
      token_name: t.name,
      role: t.role,
      cluster_admin: t.admin ? 1 : 0,
      // Bounded: both come from the client.
      client_ip: c.clientIp.slice(0, 100),
      user_agent: c.userAgent.slice(0, 500),
      action: c.action,
      method: c.method,
      route: c.route,
      object_id: c.objectId === null ? null : c.objectId.slice(0, 500),
      status: c.status,
      outcome: c.outcome,
      error_code: c.errorCode,
    };
    const done = this.d.db
      .insertInto("audit_log")
      .values(row)
      .execute()
      .then(() => {
        this.d.events?.publish({
          type: "audit.change",
          workspaceId: row.workspace_id,
          workspaceExternalId: c.principal.workspace.externalId,
          subject: row.object_id ?? row.action,
          time: row.at,
          data: auditJson(toRecord(row)),
        });
      })
      .catch((e) =>
        this.d.log.error({ err: describeError(e), action: row.action }, "audit: a change was not recorded"),
      )
      .finally(() => this.pending.delete(done));
    this.pending.add(done);
    return done;
  }

  /** Resolves once every change handed over so far is stored (tests; a stopping coordinator). */
  async idle(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  /** A workspace's records, newest first, `limit + 1` rows after the keyset position (pageOf trims). */
  async list(
    workspaceId: string,
    page: { limit: number; after: CursorKey | undefined },
    action?: string,
  ): Promise<AuditRecord[]> {
    let q = this.d.db.selectFrom("audit_log").selectAll().where("workspace_id", "=", workspaceId);
    if (action !== undefined) q = q.where("action", "=", action);
    const after = page.after as [string, string] | undefined;
    if (after) {
      const [at, id] = after;
      q = q.where((eb) => eb.or([eb("at", "<", at), eb.and([eb("at", "=", at), eb("id", "<", id)])]));
    }
    const rows = await q
      .orderBy("at", "desc")
      .orderBy("id", "desc")
      .limit(page.limit + 1)
      .execute();
    return rows.map(toRecord);
  }
}
