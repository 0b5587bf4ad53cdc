// Failed container starts per stub: exponential backoff between rounds, and
// a count of rounds so a stub that can never start gives its tasks back.

import { BerthError, describeError } from "../../shared/errors.ts";
import { CodeSourceError } from "./code-push.ts";
import type { StartBackoffOptions } from "./types.ts";

interface StubFailures {
  /** Failed rounds in a row; failures within one backoff window are one round. */
  attempts: number;
  notBefore: number;
  lastError: string;
  /** When the last failure was recorded (ms since epoch). */
  lastAt: number;
}

export class StartFailures {
  private readonly byStub = new Map<string, StubFailures>();

  constructor(private readonly o: Required<StartBackoffOptions>) {}

  /** Whether the stub waits out a backoff now. */
  blocked(stubId: string, now: number): boolean {
    const f = this.byStub.get(stubId);
    return f !== undefined && now < f.notBefore;
  }

  attempts(stubId: string): number {
    return this.byStub.get(stubId)?.attempts ?? 0;
  }

  /** Why the stub's last container start failed, until one is healthy again. */
  lastError(stubId: string): string | undefined {
    return this.byStub.get(stubId)?.lastError || undefined;
  }

  /**
   * Counts a failure; returns true when the stub has failed maxAttempts
   * rounds in a row (the caller gives up on its waiting tasks; counting
   * starts over).
   */
  record(stubId: string, now: number, message: string): boolean {
    const f = this.byStub.get(stubId) ?? { attempts: 0, notBefore: 0, lastError: "", lastAt: now };
    f.lastError = message;
    f.lastAt = now;
    if (now >= f.notBefore) {
      f.attempts++;
      const delay = Math.min(this.o.maxMs, this.o.initialMs * this.o.factor ** (f.attempts - 1));
      f.notBefore = now + delay;
    }
    this.byStub.set(stubId, f);
    if (f.attempts < this.o.maxAttempts) return false;
    f.attempts = 0;
    return true;
  }

  /** When the stub's last start failure was recorded; undefined when none is. */
  lastFailedAt(stubId: string): number | undefined {
    return this.byStub.get(stubId)?.lastAt;
  }

  reset(stubId: string): void {
    this.byStub.delete(stubId);
  }
}

// Errors that will fail the same way on every try: fail the tasks, do not retry.
const DETERMINISTIC = new Set([
  "invalid_request",
  "invalid_json",
  "not_found",
  "registry_auth_failed",
  "permission_denied",
]);

export interface ClassifiedError {
  deterministic: boolean;
  code: string;
  message: string;
}

/** Resolving the stub's secrets failed; `cause` is the secret store's error. */
export class SecretsError extends Error {
  constructor(override readonly cause: unknown) {
    super(describeError(cause));
    this.name = "SecretsError";
  }
}

// A missing secret or one this coordinator's key cannot open fails every start alike.
const SECRETS_DETERMINISTIC = new Set(["not_found", "failed_precondition", "invalid_request"]);

export function classifyStartError(e: unknown): ClassifiedError {
  if (e instanceof SecretsError) {
    const inner = e.cause instanceof BerthError ? e.cause : undefined;
    return {
      deterministic: inner !== undefined && SECRETS_DETERMINISTIC.has(inner.code),
      code: inner?.code ?? "internal",
      message: `cannot resolve the stub's secrets: ${e.message}`,
    };
  }
  if (e instanceof CodeSourceError) {
    const inner = e.cause instanceof BerthError ? e.cause : undefined;
    return {
      deterministic: inner?.code === "not_found",
      code: inner?.code ?? "internal",
      message: `cannot read the code archive: ${e.message}`,
    };
  }
  if (e instanceof BerthError)
    return { deterministic: DETERMINISTIC.has(e.code), code: e.code, message: e.message };
  return { deterministic: false, code: "internal", message: e instanceof Error ? e.message : String(e) };
}
