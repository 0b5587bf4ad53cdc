// The single sign-on area's entry point: what other areas may use of it.
export { createSso, ssoHttpRoutes } from "./area.ts";
export type { SsoOptions } from "./area.ts";
export type { GroupMapping, OidcOptions } from "./options.ts";
export type { SsoDeps } from "./routes.ts";
export { checkOidcOptions } from "./options.ts";
