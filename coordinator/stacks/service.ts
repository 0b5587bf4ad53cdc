// Stacks (docs/stacks.md): a named group of members (deployments, databases)
// applied as one. An apply is one attempt, recorded as the stack's next
// version: every changed member is deployed (databases first, then in the
// order given), then all are waited for together; when all are ready the
// attempt becomes the stack's live version and members that left the stack
// are stopped. When one fails (its deploy, or its readiness, or the
// deadline) every member deployed in the attempt is rolled back, so what ran
// before (the previous live version) runs again, and the attempt keeps the
// failed member and the reason.

import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import type { StackRecord, StackRepo, StackVersionRecord } from "./store.ts";
import {
  checkMembers,
  type MemberKind,
  type MemberOutcome,
  type MemberSpec,
  STACK_NAME,
  sameSpec,
} from "./members.ts";

export interface StackSpec {
  members: MemberSpec[];
  /** How long the attempt waits for its members to be ready. */
  ready_timeout_s: number;
}

export type StackVersion = StackVersionRecord<StackSpec, MemberOutcome>;

export interface StackView {
  stack: StackRecord;
  /** The live version (null before one succeeded). */
  current: StackVersion | null;
  /** The newest attempt (the one just made, after an apply). */
  latest: StackVersion | null;
}

export interface StackServiceDeps {
  repo: StackRepo;
  kinds: MemberKind[];
  log: Logger;
  /** @default 300 */
  defaultReadyTimeoutS?: number;
  /** How often readiness is asked while waiting. @default 500 */
  pollMs?: number;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

export const MAX_READY_TIMEOUT_S = 3600;

export interface ApplyOptions {
  /** false: answer once the attempt is recorded (status applying) and let it run. @default true */
  wait?: boolean;
}
/** The lease outlives the readiness deadline by this much (deploys and rollback). */
const LEASE_MARGIN_MS = 120_000;
/** The lease while members are deployed (a database's create waits for its image and readiness check). */
const DEPLOY_LEASE_MS = 30 * 60_000;

export class StackService {
  private readonly kinds: Map<string, MemberKind>;
  private readonly clock: () => number;
  private readonly pollMs: number;
  private readonly defaultTimeoutS: number;
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly d: StackServiceDeps) {
    this.kinds = new Map(d.kinds.map((k) => [k.kind, k]));
    this.clock = d.clock ?? Date.now;
    this.pollMs = d.pollMs ?? 500;
    this.defaultTimeoutS = d.defaultReadyTimeoutS ?? 300;
  }

  /** The member kinds this coordinator knows (deployment, and database when databases exist). */
  memberKinds(): string[] {
    return [...this.kinds.keys()];
  }

  async list(workspaceId: string): Promise<StackView[]> {
    const stacks = await this.d.repo.list(workspaceId);
    return Promise.all(stacks.map((s) => this.view(s)));
  }

  async get(workspaceId: string, id: string): Promise<StackView> {
    return this.view(await this.mustGet(workspaceId, id));
  }

  /** POST: a new stack, applied at once. */
  async create(
    workspaceId: string,
    name: unknown,
    raw: { members: unknown; ready_timeout_s?: unknown },
    o: ApplyOptions = {},
  ): Promise<StackView> {
    if (typeof name !== "string" || !STACK_NAME.test(name))
      throw invalid(
        `stack name ${JSON.stringify(name)} is not valid: 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit`,
      );
    const spec = this.spec(raw);
    await this.checkOwnership(workspaceId, undefined, spec.members);
    const stack = await this.d.repo.create(workspaceId, name, this.now());
    return this.apply(workspaceId, stack, spec, o);
  }

  /** PUT: every member of the stack updated at once. */
  async update(
    workspaceId: string,
    id: string,
    raw: { members: unknown; ready_timeout_s?: unknown },
    o: ApplyOptions = {},
  ): Promise<StackView> {
    const stack = await this.mustGet(workspaceId, id);
    const spec = this.spec(raw);
    await this.checkOwnership(workspaceId, stack.id, spec.members);
    return this.apply(workspaceId, stack, spec, o);
  }

  /** Resolves when every attempt running in the background has ended. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }

  // ---- one attempt ----

  private async apply(
    workspaceId: string,
    stack: StackRecord,
    spec: StackSpec,
    o: ApplyOptions,
  ): Promise<StackView> {
    const previous =
      stack.currentVersion > 0
        ? await this.d.repo.version<StackSpec, MemberOutcome>(stack.id, stack.currentVersion)
        : undefined;
    const outcomes = this.plan(spec, previous);
    const attempt = await this.d.repo.begin(
      stack.id,
      spec,
      outcomes,
      this.now(),
      new Date(this.clock() + DEPLOY_LEASE_MS).toISOString(),
    );
    const log = this.d.log.child({
      workspaceId,
      stackId: stack.id,
      stack: stack.name,
      version: attempt.version,
    });
    log.info({ members: outcomes.map((o) => `${o.kind}:${o.name}:${o.action}`) }, "stacks: applying");
    const run = this.run(workspaceId, stack, attempt.version, spec, previous, outcomes, log);
    if (o.wait === false) {
      // The caller follows the attempt with GET; it ends on its own (or its lease runs out with this process).
      this.running.add(run);
      void run
        .catch((e) => log.error({ err: describeError(e) }, "stacks: the attempt failed to end"))
        .finally(() => this.running.delete(run));
    } else await run;
    return this.get(workspaceId, stack.id);
  }

  /** Deploys, waits, and ends the attempt: ready, or rolled back. */
  private async run(
    workspaceId: string,
    stack: StackRecord,
    version: number,
    spec: StackSpec,
    previous: StackVersion | undefined,
    outcomes: MemberOutcome[],
    log: Logger,
  ): Promise<void> {
    const attempt = { version };
    const failure = await this.deployAndWait(workspaceId, stack, attempt.version, spec, previous, outcomes);
    const deployed = outcomes.filter((o) => o.action === "deploy" && o.ref);
    await Promise.all(
      deployed.map((o) =>
        this.kind(o)
          .settle(workspaceId, o)
          .catch((e) =>
            log.warn({ err: describeError(e), member: o.name }, "stacks: cannot release a readiness hold"),
          ),
      ),
    );
    if (failure) {
      // Rolled back in reverse order: the deployments that use a database go before it.
      for (const o of [...deployed].reverse()) {
        await this.kind(o)
          .rollback(workspaceId, o)
          .catch(
            (e) => (o.reason = [o.reason, `rollback failed: ${describeError(e)}`].filter(Boolean).join("; ")),
          );
        if (o.state !== "failed") o.state = "rolled_back";
      }
      for (const o of outcomes)
        if (o.action === "deploy" && !o.ref && o.state !== "failed") o.state = "skipped";
      await this.d.repo.finish(
        stack.id,
        attempt.version,
        { status: "rolled_back", members: outcomes, failure },
        this.now(),
      );
      log.warn({ failure }, `stacks: ${failure.member} failed: rolled back`);
    } else {
      for (const o of outcomes.filter((x) => x.action === "remove")) {
        await this.kind(o)
          .retire(workspaceId, o)
          .catch((e) => (o.reason = `cannot stop it: ${describeError(e)}`));
        o.state = "removed";
      }
      const held = await this.d.repo.finish(
        stack.id,
        attempt.version,
        { status: "ready", members: outcomes },
        this.now(),
      );
      if (!held)
        log.warn("stacks: the attempt lost its lease before it ended (another apply took the stack over)");
      else log.info("stacks: ready");
    }
  }

  /** Deploys the changed members, then waits for all; the first failure, or undefined when all are ready. */
  private async deployAndWait(
    workspaceId: string,
    stack: StackRecord,
    version: number,
    spec: StackSpec,
    previous: StackVersion | undefined,
    outcomes: MemberOutcome[],
  ): Promise<{ member: string; reason: string } | undefined> {
    const specOf = new Map(spec.members.map((m) => [`${m.kind}\u0000${m.name}`, m]));
    const previousOf = new Map((previous?.spec.members ?? []).map((m) => [`${m.kind}\u0000${m.name}`, m]));
    const order = outcomes
      .filter((o) => o.action === "deploy")
      .sort((a, b) => this.kind(a).order - this.kind(b).order);
    for (const o of order) {
      try {
        const key = `${o.kind}\u0000${o.name}`;
        const made = await this.kind(o).apply(
          workspaceId,
          specOf.get(key) as MemberSpec,
          previousOf.get(key),
        );
        o.ref = made.ref;
        o.version = made.version;
        if (made.existed) o.previous ??= { ref: made.ref, version: made.version };
        o.state = "pending";
      } catch (e) {
        o.state = "failed";
        o.reason = describeError(e);
        return { member: o.name, reason: `cannot deploy it: ${o.reason}` };
      }
    }
    // ready_timeout_s counts from here: a deploy's own wait (a database's image build) is not readiness.
    const deadline = this.clock() + spec.ready_timeout_s * 1000;
    const leaseUntil = new Date(deadline + LEASE_MARGIN_MS).toISOString();
    await this.d.repo.progress(stack.id, version, outcomes, this.now(), leaseUntil);
    for (;;) {
      const waiting = order.filter((o) => o.state === "pending");
      if (waiting.length === 0) return undefined;
      for (const o of waiting) {
        const r = await this.kind(o)
          .readiness(workspaceId, o)
          .catch((e): { ready: false; failed: string } => ({ ready: false, failed: describeError(e) }));
        if (r.ready) {
          o.state = "ready";
          await this.d.repo.progress(stack.id, version, outcomes, this.now());
        } else if (r.failed) {
          o.state = "failed";
          o.reason = r.failed;
          return { member: o.name, reason: r.failed };
        }
      }
      if (this.clock() >= deadline) {
        const late = order.find((o) => o.state === "pending") as MemberOutcome;
        late.state = "failed";
        late.reason = `not ready within ready_timeout_s (${spec.ready_timeout_s} s)`;
        return { member: late.name, reason: late.reason };
      }
      await sleep(this.pollMs);
    }
  }

  /** What each member does in this attempt: deployed anew, kept as live, or removed. */
  private plan(spec: StackSpec, previous: StackVersion | undefined): MemberOutcome[] {
    const live = new Map<string, { spec: MemberSpec; outcome: MemberOutcome }>();
    for (const m of previous?.spec.members ?? []) {
      const o = previous?.members.find((x) => x.kind === m.kind && x.name === m.name && x.ref);
      if (o) live.set(`${m.kind}\u0000${m.name}`, { spec: m, outcome: o });
    }
    const out: MemberOutcome[] = spec.members.map((m) => {
      const key = `${m.kind}\u0000${m.name}`;
      const was = live.get(key);
      live.delete(key);
      const previousRef = was?.outcome.ref ? { ref: was.outcome.ref, version: was.outcome.version } : null;
      if (was && sameSpec(was.spec, m))
        return {
          name: m.name,
          kind: m.kind,
          action: "keep",
          ref: previousRef?.ref ?? null,
          version: previousRef?.version ?? null,
          previous: previousRef,
          state: "ready",
        };
      return {
        name: m.name,
        kind: m.kind,
        action: "deploy",
        ref: null,
        version: null,
        previous: previousRef,
        state: "skipped",
      };
    });
    for (const { outcome } of live.values())
      out.push({
        name: outcome.name,
        kind: outcome.kind,
        action: "remove",
        ref: outcome.ref,
        version: outcome.version,
        previous: null,
        state: "ready",
      });
    return out;
  }

  // ---- helpers ----

  private spec(raw: { members: unknown; ready_timeout_s?: unknown }): StackSpec {
    const members = checkMembers(raw.members, this.kinds);
    const t = raw.ready_timeout_s ?? this.defaultTimeoutS;
    if (typeof t !== "number" || !Number.isInteger(t) || t < 1 || t > MAX_READY_TIMEOUT_S)
      throw invalid(
        `ready_timeout_s must be an integer from 1 to ${MAX_READY_TIMEOUT_S} seconds, not ${JSON.stringify(t)}`,
      );
    return { members, ready_timeout_s: t };
  }

  /** A member belongs to one stack: another stack's live member of the same kind and name is a conflict. */
  private async checkOwnership(
    workspaceId: string,
    stackId: string | undefined,
    members: MemberSpec[],
  ): Promise<void> {
    const wanted = new Set(members.map((m) => `${m.kind}\u0000${m.name}`));
    for (const other of await this.d.repo.list(workspaceId)) {
      if (other.id === stackId || other.currentVersion === 0) continue;
      const v = await this.d.repo.version<StackSpec, MemberOutcome>(other.id, other.currentVersion);
      const clash = v?.members.find((o) => o.state !== "removed" && wanted.has(`${o.kind}\u0000${o.name}`));
      if (clash)
        throw new BerthError(
          "conflict",
          `the ${clash.kind} ${clash.name} is a member of stack ${other.name} (${other.id}): a member belongs to one stack`,
        );
    }
  }

  private kind(o: { kind: string }): MemberKind {
    const k = this.kinds.get(o.kind);
    if (!k) throw new BerthError("internal", `stack member kind ${o.kind} is not known to this coordinator`);
    return k;
  }

  private async mustGet(workspaceId: string, id: string): Promise<StackRecord> {
    const s = await this.d.repo.get(workspaceId, id);
    if (!s) throw new BerthError("not_found", `stack ${id} not found`);
    return s;
  }

  private async view(stack: StackRecord): Promise<StackView> {
    const [latest] = await this.d.repo.versions<StackSpec, MemberOutcome>(stack.id, 1);
    const current =
      stack.currentVersion === 0
        ? null
        : latest?.version === stack.currentVersion
          ? latest
          : ((await this.d.repo.version<StackSpec, MemberOutcome>(stack.id, stack.currentVersion)) ?? null);
    return { stack, current, latest: latest ?? null };
  }

  private now(): string {
    return new Date(this.clock()).toISOString();
  }
}
