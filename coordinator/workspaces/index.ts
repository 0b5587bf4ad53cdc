// The workspaces area: the workspace and token routes (their records are the store's) and the audit trail.
export { workspaceRoutes } from "./routes.ts";
export { createWorkspaces, workspacesHttpRoutes } from "./area.ts";
export type { WorkspaceRecords } from "./area.ts";
export { AuditTrail, auditJson } from "./audit.ts";
export type { AuditEventSink, AuditRecord } from "./audit.ts";
