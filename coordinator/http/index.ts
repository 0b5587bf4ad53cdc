// The http area's entry point: what other areas may use of it.
export { authenticator, principalOf, requireAdmin } from "./auth.ts";
export {
  ROLES,
  ROLE_CAPABILITIES,
  accessOf,
  allowDeployment,
  checkAccess,
  isRole,
  mayInvoke,
  roleCovers,
  roleHas,
  rolesWith,
} from "./access.ts";
export type { Capability, RouteAccess } from "./access.ts";
export { bearerToken } from "./bearer.ts";
export { CSRF_HEADER, SESSION_COOKIE, requestCookies, setCookie } from "./cookies.ts";
export { DEFAULT_BODY_LIMIT } from "./body-limits.ts";
export { installErrorHandlers } from "./errors.ts";
export { GatewayFailure, gatewayResponse } from "./gateway.ts";
export { NextCursor, pageOf, pageQuery, pageRequest, paginate } from "./pagination.ts";
export type { CursorKey } from "./pagination.ts";
export {
  HttpRefusal,
  MaskedError,
  newErrorId,
  maskedDetailMessage,
  openAiType,
  publicError,
} from "./public-error.ts";
export type { EdgeLog, PublicError } from "./public-error.ts";
export { answerOnSocket, refuseUpgrade, sendError, writeJsonAnswer } from "./raw-answer.ts";
export type { JsonAnswerTarget } from "./raw-answer.ts";
export { RawRouteTable, addUpgradeRoute, decodePathSegment, rawRoutesOf } from "./raw-routes.ts";
export type { RawRoute } from "./raw-routes.ts";
export { ErrorResponse } from "./schemas.ts";
export { gatewayScope, requireDeclarations, tokenScope } from "./scopes.ts";
export type { ScopeAuth } from "./scopes.ts";
export { recordChanges } from "./changes.ts";
export type { Change, ChangeRecorder } from "./changes.ts";
export { SSE_HEARTBEAT_MS, openSse, pumpSse, resumeId } from "./sse.ts";
export type { SseStream } from "./sse.ts";
export { WorkspaceErrors, WsParams, isoQueryTime, scopedWorkspace } from "./workspace-scope.ts";
export { createFastify, type FastifyOptions } from "./fastify.ts";
export { routesOf } from "./area.ts";
export type { Area, AreaRoutes } from "./area.ts";
