// The workspaces area: the current workspace, its tokens and its audit
// trail. The workspace and token records themselves live in the store
// (http/ authenticates every request with them).
import type { Area, AreaRoutes } from "../http/index.ts";
import type { TokenRepo, WorkspaceRepo } from "../store/index.ts";
import type { AuditTrail } from "./audit.ts";
import { auditRoutes } from "./audit-routes.ts";
import { workspaceRoutes } from "./routes.ts";

export interface WorkspaceRecords {
  workspaces: WorkspaceRepo;
  tokens: TokenRepo;
  /** The audit trail: its route is served when given. */
  audit?: AuditTrail;
}

export function workspacesHttpRoutes(records: WorkspaceRecords): AreaRoutes {
  return { api: [workspaceRoutes(records), ...(records.audit ? [auditRoutes(records.audit)] : [])] };
}

export function createWorkspaces(records: WorkspaceRecords): Area<WorkspaceRecords> {
  return { service: records, routes: workspacesHttpRoutes(records) };
}
