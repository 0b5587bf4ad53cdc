// `berth login` and `berth logout`: single sign-on for the CLI (docs/sso.md). The OAuth device
// authorization grant (RFC 8628) against the coordinator's OpenID provider,
// then the provider's ID token exchanged at the coordinator for a berth
// session, saved as the profile's token.

import type { Command } from "commander";
import type * as OpenId from "openid-client";
import { BerthError, describeError } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { DEFAULT_URL, configPath, forgetProfileToken, readConfig, saveProfile } from "../config.ts";

interface AuthConfig {
  enabled: boolean;
  issuer?: string;
  client_id?: string;
  scopes?: string[];
}

interface SessionAnswer {
  token: string;
  session: { id: string; name: string; role: string; expires_at: string };
  workspace: { external_id: string; name: string };
}

/** Plain HTTP only to a provider on this host (a developer's or a test's). */
const loopbackHttp = (u: URL) =>
  u.protocol === "http:" && ["127.0.0.1", "[::1]", "localhost"].includes(u.hostname);

export function loginCommand(program: Command): void {
  program
    .command("login")
    .description(
      "sign in by the coordinator's single sign-on (OpenID Connect device flow) and save the session in a profile",
    )
    .option("--profile <name>", "the profile to save the session in (default: $BERTH_PROFILE or default)")
    .option("--url <url>", "the coordinator URL (default: the profile's, else http://127.0.0.1:8420)")
    .option("--workspace <name>", "the workspace to sign in to (default: the first one your groups map to)")
    .action(async (opts: { profile?: string; url?: string; workspace?: string }) => {
      const profile = opts.profile ?? (process.env.BERTH_PROFILE || "default");
      const url = (opts.url ?? readConfig().profiles[profile]?.url ?? DEFAULT_URL).replace(/\/+$/, "");
      const coordinator = new ApiClient(url, undefined, { anonymous: true });
      const ac = await coordinator.request<AuthConfig>("GET", "/api/v1/auth/config");
      if (!ac.enabled || !ac.issuer || !ac.client_id) {
        throw new BerthError(
          "failed_precondition",
          `the coordinator at ${url} has no single sign-on configured: use a token (berth configure ${profile} --token TOKEN --url ${url})`,
        );
      }
      // Loaded here, not at start: every other command runs without it.
      const oidc: typeof OpenId = await import("openid-client");
      const issuer = new URL(ac.issuer);
      let config: OpenId.Configuration;
      try {
        config = await oidc.discovery(issuer, ac.client_id, undefined, oidc.None(), {
          ...(loopbackHttp(issuer) ? { execute: [oidc.allowInsecureRequests] } : {}),
        });
      } catch (e) {
        throw new BerthError(
          "unavailable",
          `the OpenID provider ${issuer.href} could not be reached: ${describeError(e)}`,
        );
      }
      const device = await oidc.initiateDeviceAuthorization(config, {
        scope: (ac.scopes ?? ["openid"]).join(" "),
      });
      process.stdout.write(
        `To sign in, open ${device.verification_uri} and enter the code ${device.user_code}\n` +
          (device.verification_uri_complete ? `or open ${device.verification_uri_complete}\n` : "") +
          "Waiting for the sign-in...\n",
      );
      let tokens: Awaited<ReturnType<typeof oidc.pollDeviceAuthorizationGrant>>;
      try {
        tokens = await oidc.pollDeviceAuthorizationGrant(config, device);
      } catch (e) {
        throw new BerthError("unauthenticated", `the sign-in did not complete: ${describeError(e)}`);
      }
      if (!tokens.id_token)
        throw new BerthError("unauthenticated", "the OpenID provider returned no ID token");
      const made = await coordinator.request<SessionAnswer>("POST", "/api/v1/auth/session", {
        id_token: tokens.id_token,
        ...(tokens.access_token ? { access_token: tokens.access_token } : {}),
        ...(opts.workspace ? { workspace: opts.workspace } : {}),
      });
      saveProfile(profile, { url, token: made.token });
      process.stdout.write(
        `signed in as ${made.session.name.replace(/^sso:/, "")}: ${made.session.role} in workspace ${made.workspace.name} (${made.workspace.external_id}), until ${made.session.expires_at}\n` +
          `saved profile ${profile} (${url}) to ${configPath()}\n`,
      );
    });
}

export function logoutCommand(program: Command): void {
  program
    .command("logout")
    .description("revoke the profile's single sign-on session at the coordinator and forget it")
    .option("--profile <name>", "the profile (default: $BERTH_PROFILE or default)")
    .action(async (opts: { profile?: string }) => {
      const profile = opts.profile ?? (process.env.BERTH_PROFILE || "default");
      const p = readConfig().profiles[profile];
      if (!p?.token)
        throw new BerthError("not_found", `profile ${profile} has no token: nothing to sign out of`);
      if (!p.token.startsWith("bss_")) {
        throw new BerthError(
          "invalid_request",
          `profile ${profile} holds an API token, not a session: revoke it with berth token revoke`,
        );
      }
      const url = (p.url ?? DEFAULT_URL).replace(/\/+$/, "");
      const api = new ApiClient(url, p.token);
      try {
        const { session } = await api.request<{ session: { id: string } }>("GET", "/api/v1/session/current");
        await api.request("DELETE", `/api/v1/session/${encodeURIComponent(session.id)}`);
      } catch (e) {
        // A session already expired or revoked is signed out all the same.
        if (!(e instanceof BerthError && e.code === "unauthenticated")) throw e;
      }
      forgetProfileToken(profile);
      process.stdout.write(`signed out: the session of profile ${profile} is revoked\n`);
    });
}
