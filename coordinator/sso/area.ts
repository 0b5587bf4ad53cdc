// The single sign-on area (docs/sso.md): OpenID Connect logins for the
// dashboard and `berth login`, made into sessions by the operator's group
// mapping. Without the config's `oidc` it serves only the routes that say so.
import type { Area, AreaRoutes, ChangeRecorder } from "../http/index.ts";
import type { TokenRepo, WorkspaceRepo } from "../store/index.ts";
import { type OidcOptions, resolveOidcOptions } from "./options.ts";
import { IdentityProvider } from "./provider.ts";
import { type SsoDeps, sessionRoutes, ssoPublicRoutes } from "./routes.ts";
import { SessionService } from "./sessions.ts";

export interface SsoOptions {
  /** The coordinator config's `oidc`; absent: single sign-on is off. */
  oidc?: OidcOptions;
  /** The URL browsers reach the coordinator at (the default redirect URL's base). */
  publicUrl: string;
  tokens: TokenRepo;
  workspaces: WorkspaceRepo;
  /** Sign-ins are recorded here (action session.create). */
  audit?: ChangeRecorder;
}

export function ssoHttpRoutes(d: SsoDeps): AreaRoutes {
  return { public: [ssoPublicRoutes(d)], api: [sessionRoutes(d)] };
}

export function createSso(o: SsoOptions): Area<SsoDeps> {
  const deps: SsoDeps = { tokens: o.tokens };
  if (o.oidc) {
    const options = resolveOidcOptions(o.oidc, o.publicUrl);
    deps.sso = {
      options,
      provider: new IdentityProvider(options),
      sessions: new SessionService({
        options,
        tokens: o.tokens,
        workspaces: o.workspaces,
        ...(o.audit ? { audit: o.audit } : {}),
      }),
    };
  }
  return { service: deps, routes: ssoHttpRoutes(deps) };
}
