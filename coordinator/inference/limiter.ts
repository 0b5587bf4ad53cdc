// Per-workspace limits of the /v1 gateway (docs/inference.md, docs/limits.md):
// requests in flight at once (max_inference_requests) and prompt plus
// completion tokens in the last 60 s (max_tokens_per_minute). Counted by this
// coordinator in memory: with N coordinators each enforces the limits on the
// requests it serves.

import type { BerthError } from "../../shared/errors.ts";
import { HttpRefusal } from "../http/index.ts";

export const TOKEN_WINDOW_MS = 60_000;
/** The window is kept in buckets of this size. */
const BUCKET_MS = 1000;

export interface InferenceLimits {
  maxInferenceRequests: number | null;
  maxTokensPerMinute: number | null;
}

interface WorkspaceCounts {
  inFlight: number;
  /** bucket start (ms) → tokens */
  buckets: Map<number, number>;
}

export class InferenceLimiter {
  private readonly byWorkspace = new Map<string, WorkspaceCounts>();

  constructor(private readonly clock: () => number = Date.now) {}

  /**
   * Counts one request in flight, or throws limit_exceeded (429 with
   * Retry-After) when a limit is reached. Every admitted request calls
   * release() once.
   */
  admit(workspaceId: string, limits: InferenceLimits): void {
    const c = this.countsOf(workspaceId);
    const max = limits.maxInferenceRequests;
    if (max !== null && c.inFlight >= max) {
      throw refusal(
        `the workspace has ${c.inFlight} inference requests in flight and its limit max_inference_requests is ${max}; retry when one ends`,
        1,
        { limit: "max_inference_requests" },
      );
    }
    const tpm = limits.maxTokensPerMinute;
    if (tpm !== null) {
      const used = this.tokensLastMinute(workspaceId);
      if (used >= tpm) {
        throw refusal(
          `the workspace used ${used} tokens in the last minute and its limit max_tokens_per_minute is ${tpm}`,
          this.secondsUntilBelow(c, tpm),
          { limit: "max_tokens_per_minute" },
        );
      }
    }
    c.inFlight++;
  }

  release(workspaceId: string): void {
    const c = this.byWorkspace.get(workspaceId);
    if (!c) return;
    c.inFlight = Math.max(0, c.inFlight - 1);
    this.dropIdle(workspaceId, c);
  }

  /** Tokens a finished request used (as the model server reported them). */
  addTokens(workspaceId: string, tokens: number): void {
    if (!(tokens > 0)) return;
    const c = this.countsOf(workspaceId);
    const b = Math.floor(this.clock() / BUCKET_MS) * BUCKET_MS;
    c.buckets.set(b, (c.buckets.get(b) ?? 0) + tokens);
  }

  tokensLastMinute(workspaceId: string): number {
    const c = this.byWorkspace.get(workspaceId);
    if (!c) return 0;
    this.prune(c);
    let n = 0;
    for (const v of c.buckets.values()) n += v;
    return n;
  }

  /** What the limits route shows. */
  usage(workspaceId: string): { requests: number; tokensLastMinute: number } {
    return {
      requests: this.byWorkspace.get(workspaceId)?.inFlight ?? 0,
      tokensLastMinute: this.tokensLastMinute(workspaceId),
    };
  }

  private secondsUntilBelow(c: WorkspaceCounts, max: number): number {
    let total = 0;
    for (const v of c.buckets.values()) total += v;
    const now = this.clock();
    for (const [start, v] of [...c.buckets].sort((a, b) => a[0] - b[0])) {
      total -= v;
      if (total < max) return Math.max(1, Math.ceil((start + BUCKET_MS + TOKEN_WINDOW_MS - now) / 1000));
    }
    return Math.ceil(TOKEN_WINDOW_MS / 1000);
  }

  private prune(c: WorkspaceCounts): void {
    const oldest = this.clock() - TOKEN_WINDOW_MS;
    for (const b of c.buckets.keys()) if (b + BUCKET_MS <= oldest) c.buckets.delete(b);
  }

  private countsOf(workspaceId: string): WorkspaceCounts {
    let c = this.byWorkspace.get(workspaceId);
    if (!c) {
      c = { inFlight: 0, buckets: new Map() };
      this.byWorkspace.set(workspaceId, c);
    }
    return c;
  }

  private dropIdle(workspaceId: string, c: WorkspaceCounts): void {
    this.prune(c);
    if (c.inFlight === 0 && c.buckets.size === 0) this.byWorkspace.delete(workspaceId);
  }
}

function refusal(message: string, retryAfterS: number, details: Record<string, unknown>): BerthError {
  return new HttpRefusal("limit_exceeded", message, {
    status: 429,
    headers: { "retry-after": String(retryAfterS) },
    details,
  });
}
