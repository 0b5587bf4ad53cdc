// The coordinator as an OpenID Connect relying party (openid-client): the
// provider's discovery document, read once and kept; the dashboard's
// authorization code flow with PKCE; and the check of an ID token `berth
// login` brings (signature against the provider's JWKS, issuer, audience,
// expiry).

import { createRemoteJWKSet, jwtVerify, type JWTPayload } from "jose";
import * as client from "openid-client";
import { BerthError } from "../../shared/errors.ts";
import { isLoopback, type ResolvedOidcOptions } from "./options.ts";

/** Who the provider says signed in: its subject, a name to show, and the claims the groups come from. */
export interface Identity {
  subject: string;
  /** email, else preferred_username, else name, else the subject. */
  name: string;
  claims: Record<string, unknown>;
}

/** A dashboard login under way: what the callback must find in the browser's login cookie. */
export interface PendingLogin {
  state: string;
  nonce: string;
  verifier: string;
  /** The workspace asked for (`/auth/login?workspace=`), if any. */
  workspace?: string;
}

export class IdentityProvider {
  private config: Promise<client.Configuration> | undefined;
  private jwks: ReturnType<typeof createRemoteJWKSet> | undefined;

  constructor(private readonly o: ResolvedOidcOptions) {}

  /** The provider's metadata, fetched on first need; a failure is retried at the next login. */
  private discover(): Promise<client.Configuration> {
    if (!this.config) {
      const auth = this.o.clientSecret ? client.ClientSecretPost(this.o.clientSecret) : client.None();
      this.config = client
        .discovery(this.o.issuer, this.o.clientId, undefined, auth, {
          ...(isLoopback(this.o.issuer) && this.o.issuer.protocol === "http:"
            ? { execute: [client.allowInsecureRequests] }
            : {}),
          timeout: 10,
        })
        .catch((e: unknown) => {
          this.config = undefined;
          throw new BerthError(
            "unavailable",
            `the OpenID provider ${this.o.issuer.href} could not be reached: ${(e as Error).message}`,
          );
        });
    }
    return this.config;
  }

  /** Starts a dashboard login: the provider's authorization URL (S256 PKCE, state, nonce) and what to keep. */
  async beginLogin(workspace?: string): Promise<{ url: URL; pending: PendingLogin }> {
    const config = await this.discover();
    const verifier = client.randomPKCECodeVerifier();
    const pending: PendingLogin = {
      state: client.randomState(),
      nonce: client.randomNonce(),
      verifier,
      ...(workspace ? { workspace } : {}),
    };
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: this.o.redirectUrl.href,
      scope: this.o.scopes.join(" "),
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state: pending.state,
      nonce: pending.nonce,
    });
    return { url, pending };
  }

  /** Finishes a dashboard login: the code for tokens (checking state, nonce and PKCE), and who signed in. */
  async finishLogin(query: string, pending: PendingLogin): Promise<Identity> {
    const config = await this.discover();
    const current = new URL(this.o.redirectUrl.href);
    current.search = query;
    let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
    try {
      tokens = await client.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
    } catch (e) {
      throw new BerthError(
        "unauthenticated",
        `the OpenID provider's answer was refused: ${(e as Error).message}`,
      );
    }
    const claims = tokens.claims();
    if (!claims) throw new BerthError("unauthenticated", "the OpenID provider returned no ID token");
    return this.identity(claims as Record<string, unknown>, tokens.access_token);
  }

  /**
   * Checks an ID token `berth login` got from the provider by the device
   * flow (audience: the CLI's client or the dashboard's) and answers who it
   * names; with the access token, groups missing from the ID token come from
   * the userinfo endpoint.
   */
  async verifyIdToken(idToken: string, accessToken?: string): Promise<Identity> {
    const config = await this.discover();
    const meta = config.serverMetadata();
    if (!meta.jwks_uri) throw new BerthError("unavailable", "the OpenID provider publishes no jwks_uri");
    this.jwks ??= createRemoteJWKSet(new URL(meta.jwks_uri));
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(idToken, this.jwks, {
        issuer: meta.issuer,
        audience: [...new Set([this.o.clientId, this.o.cliClientId])],
        requiredClaims: ["sub", "exp", "iat"],
      }));
    } catch (e) {
      throw new BerthError("unauthenticated", `the ID token was refused: ${(e as Error).message}`);
    }
    return this.identity(payload as Record<string, unknown>, accessToken);
  }

  private async identity(claims: Record<string, unknown>, accessToken?: string): Promise<Identity> {
    const subject = String(claims.sub ?? "");
    if (!subject) throw new BerthError("unauthenticated", "the ID token names no subject (sub)");
    let all = claims;
    if (claims[this.o.groupsClaim] === undefined && accessToken) {
      // Some providers put groups in userinfo only; it must be about the same user.
      const config = await this.discover();
      try {
        all = { ...(await client.fetchUserInfo(config, accessToken, subject)), ...claims };
      } catch (e) {
        throw new BerthError(
          "unauthenticated",
          `the provider's userinfo was refused: ${(e as Error).message}`,
        );
      }
    }
    const name = [all.email, all.preferred_username, all.name].find((v) => typeof v === "string" && v);
    return { subject, name: (name as string | undefined) ?? subject, claims: all };
  }
}
