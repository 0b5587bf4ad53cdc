// A stack's members (docs/stacks.md) are of a kind: `deployment` (a version
// of a named deployment, made by the deployment service) or `database`.
// Each kind says how its member is checked, deployed, found ready, rolled
// back and retired; the stack service does the rest (ordering, waiting,
// recording) the same way for every kind.

import { BerthError, invalid } from "../../shared/errors.ts";

/** A member as asked (the JSON body's `members[i]`); the kind reads its own fields. */
export interface MemberSpec {
  kind: string;
  name: string;
  [field: string]: unknown;
}

export type MemberAction = "deploy" | "keep" | "remove";

export type MemberState =
  /** deployed, not yet found ready */
  | "pending"
  /** deployed and found ready (or kept: the live version's, unchanged) */
  | "ready"
  /** its deploy or readiness failed: the attempt's failure names it */
  | "failed"
  /** deployed in an attempt that failed: gone again, the previous version restored */
  | "rolled_back"
  /** left the stack in this version: what it ran was stopped */
  | "removed"
  /** not reached: the attempt failed before this member was deployed */
  | "skipped";

/** What one member became in one attempt (stack_versions.members). */
export interface MemberOutcome {
  name: string;
  kind: string;
  action: MemberAction;
  /** The object of this attempt: a deployment id, a database id; null until deployed. */
  ref: string | null;
  /** The deployment's version number (null for kinds without one). */
  version: number | null;
  /** What was live before this attempt, restored on rollback; null for a new member. */
  previous: { ref: string; version: number | null } | null;
  state: MemberState;
  /** Why it failed, or what its rollback could not restore. */
  reason?: string;
}

export type Readiness = { ready: true } | { ready: false; failed?: string };

export interface MemberKind {
  readonly kind: string;
  /** Order of deploying: lower first (databases before the deployments that use them). */
  readonly order: number;
  /** Refuses a bad member with a message naming the field (throws invalid). */
  check(spec: MemberSpec): void;
  /**
   * Deploys the member's new version (`previous`: as the live version asked it); the object it
   * made, or (`existed`) the one already there that it uses, which rollback leaves in place.
   */
  apply(
    workspaceId: string,
    spec: MemberSpec,
    previous?: MemberSpec,
  ): Promise<{ ref: string; version: number | null; existed?: boolean }>;
  /** Whether the member's new version is ready, failed (why), or not yet known. */
  readiness(workspaceId: string, o: MemberOutcome): Promise<Readiness>;
  /** After the attempt ended, either way: gives back what apply held for the readiness check. */
  settle(workspaceId: string, o: MemberOutcome): Promise<void>;
  /** The attempt failed: the new version goes away and `o.previous` (if any) is live again. */
  rollback(workspaceId: string, o: MemberOutcome): Promise<void>;
  /** The member left the stack: what its live version runs stops. */
  retire(workspaceId: string, o: MemberOutcome): Promise<void>;
}

export const STACK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
export const MAX_MEMBERS = 50;

/** Checks the member list as a whole and each member by its kind. */
export function checkMembers(members: unknown, kinds: ReadonlyMap<string, MemberKind>): MemberSpec[] {
  if (!Array.isArray(members) || members.length === 0)
    throw invalid("a stack needs members: a non-empty array of {kind, name, ...}");
  if (members.length > MAX_MEMBERS)
    throw invalid(`a stack has at most ${MAX_MEMBERS} members; this one has ${members.length}`);
  const seen = new Set<string>();
  const out: MemberSpec[] = [];
  members.forEach((m, i) => {
    if (typeof m !== "object" || m === null || Array.isArray(m))
      throw invalid(`members[${i}] is not an object`);
    const { kind, name } = m as { kind?: unknown; name?: unknown };
    const k = typeof kind === "string" ? kinds.get(kind) : undefined;
    if (!k)
      throw invalid(
        `members[${i}].kind ${JSON.stringify(kind)} is not a member kind: use one of ${[...kinds.keys()].join(", ")}`,
      );
    if (typeof name !== "string" || name === "")
      throw invalid(`members[${i}].name must be a non-empty string`);
    const key = `${k.kind}\u0000${name}`;
    if (seen.has(key)) throw invalid(`members[${i}]: the stack names the ${k.kind} ${name} twice`);
    seen.add(key);
    try {
      k.check(m as MemberSpec);
    } catch (e) {
      if (!(e instanceof BerthError)) throw e;
      throw new BerthError(e.code, `members[${i}] (${k.kind} ${name}): ${e.message}`, e.details);
    }
    out.push(m as MemberSpec);
  });
  return out;
}

/** Same member asked the same way: the live version is kept, not deployed again. */
export function sameSpec(a: MemberSpec, b: MemberSpec): boolean {
  return canonical(a) === canonical(b);
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object")
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(",")}}`;
  return JSON.stringify(v) ?? "null";
}
