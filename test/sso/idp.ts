// A real OpenID provider for the single sign-on tests: the `oidc-provider`
// package on loopback, with its development login and consent pages (any
// password), the users below, and one public client that may use the
// authorization code flow with PKCE and the device authorization grant.

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import Provider from "oidc-provider";

export interface TestUser {
  /** What to type in the provider's login form; also the subject (sub). */
  login: string;
  email: string;
  groups: string[];
}

export interface TestIdp {
  issuer: string;
  clientId: string;
  close(): Promise<void>;
}

export async function startIdp(o: { users: TestUser[]; redirectUris: string[] }): Promise<TestIdp> {
  const server: Server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clientId = "berth-test";
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        token_endpoint_auth_method: "none",
        grant_types: ["authorization_code", "urn:ietf:params:oauth:grant-type:device_code"],
        response_types: ["code"],
        redirect_uris: o.redirectUris,
      },
    ],
    features: { devInteractions: { enabled: true }, deviceFlow: { enabled: true } },
    pkce: { required: () => true },
    scopes: ["openid", "profile", "email", "groups"],
    claims: {
      openid: ["sub"],
      email: ["email"],
      profile: ["name", "preferred_username"],
      groups: ["groups"],
    },
    // Claims asked for by scope go into the ID token too (as many providers' "groups" mappers do).
    conformIdTokenClaims: false,
    cookies: { keys: ["berth-sso-test-cookie-key"] },
    findAccount: async (_ctx, id) => {
      const u = o.users.find((x) => x.login === id);
      if (!u) return undefined;
      return {
        accountId: u.login,
        claims: async () => ({
          sub: u.login,
          email: u.email,
          preferred_username: u.login,
          name: u.login,
          groups: u.groups,
        }),
      };
    },
  });
  server.on("request", provider.callback());
  return {
    issuer,
    clientId,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
