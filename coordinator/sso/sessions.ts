// Single sign-on sessions (docs/sso.md): who the provider says signed in,
// through the operator's group mapping, to a session of one workspace with
// the strongest role a group of theirs gives there. A session is a token
// record of kind "session" (coordinator/store/workspaces.ts), so the token
// hook takes it exactly like an API token of that role, until it expires or
// is revoked.

import { BerthError } from "../../shared/errors.ts";
import { roleCovers } from "../http/index.ts";
import type { ChangeRecorder } from "../http/index.ts";
import type { Principal, Role, TokenRecord, TokenRepo, Workspace, WorkspaceRepo } from "../store/index.ts";
import type { ResolvedOidcOptions } from "./options.ts";
import type { Identity } from "./provider.ts";

/** Where a sign-in came from, for the audit trail. */
export interface SignInOrigin {
  clientIp: string;
  userAgent: string;
  /** The route that made the session (its pattern). */
  route: string;
}

/** The groups in a claim: a list of strings, or one string. */
export function groupsOf(claims: Record<string, unknown>, claim: string): string[] {
  const v = claims[claim];
  if (typeof v === "string") return [v];
  if (Array.isArray(v)) return v.filter((g): g is string => typeof g === "string");
  return [];
}

export class SessionService {
  constructor(
    private readonly d: {
      options: ResolvedOidcOptions;
      tokens: TokenRepo;
      workspaces: WorkspaceRepo;
      audit?: ChangeRecorder;
    },
  ) {}

  /**
   * The workspaces the user's groups map to, each with the strongest role a
   * group of theirs gives there, in the order the operator's mappings list them.
   */
  async grants(groups: readonly string[]): Promise<{ workspace: Workspace; role: Role }[]> {
    const all = await this.d.workspaces.list();
    const out: { workspace: Workspace; role: Role }[] = [];
    for (const m of this.d.options.mappings) {
      if (!groups.includes(m.group)) continue;
      const ws = all.find((w) => w.name === m.workspace || w.externalId === m.workspace);
      if (!ws) continue;
      const had = out.find((g) => g.workspace.id === ws.id);
      if (!had) out.push({ workspace: ws, role: m.role });
      else if (roleCovers(m.role, had.role) && m.role !== had.role) had.role = m.role;
    }
    return out;
  }

  /** Makes a session for `who` in the workspace asked for (its name or id), else the first one mapped. */
  async signIn(
    who: Identity,
    o: { workspace?: string; origin: SignInOrigin },
  ): Promise<{ secret: string; session: TokenRecord; workspace: Workspace }> {
    const groups = groupsOf(who.claims, this.d.options.groupsClaim);
    const grants = await this.grants(groups);
    if (grants.length === 0) {
      const known = [...new Set(this.d.options.mappings.map((m) => m.group))];
      throw new BerthError(
        "permission_denied",
        `${who.name} is in no group this coordinator maps to a workspace: the provider's ${this.d.options.groupsClaim} claim lists ${groups.length ? groups.join(", ") : "no groups"}; the mapped groups are ${known.join(", ")}`,
      );
    }
    const grant = o.workspace
      ? grants.find((g) => g.workspace.name === o.workspace || g.workspace.externalId === o.workspace)
      : grants[0];
    if (!grant) {
      throw new BerthError(
        "permission_denied",
        `${who.name} has no role in workspace ${o.workspace}; their groups map to ${grants.map((g) => g.workspace.name).join(", ")}`,
      );
    }
    const { record, secret } = await this.d.tokens.createSession(grant.workspace.id, {
      name: `sso:${who.name}`,
      role: grant.role,
      subject: who.subject,
      expiresAt: new Date(Date.now() + this.d.options.sessionTtlMs),
    });
    await this.audit({ workspace: grant.workspace, token: record }, o.origin);
    return { secret, session: record, workspace: grant.workspace };
  }

  private async audit(principal: Principal, origin: SignInOrigin): Promise<void> {
    await this.d.audit?.record({
      principal,
      action: "session.create",
      method: "POST",
      route: origin.route,
      objectId: principal.token.id,
      clientIp: origin.clientIp,
      userAgent: origin.userAgent,
      status: 201,
      outcome: "ok",
      errorCode: null,
      at: new Date().toISOString(),
    });
  }
}
