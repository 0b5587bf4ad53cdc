// Code archives on agents: pushed at most once per agent and hash, with one
// push in flight per pair however many containers wait for it.

import type { ContainerApi } from "../../api/index.ts";
import type { CodeSource } from "./types.ts";

/** The coordinator could not read its own copy of the archive (not the agent's fault). */
export class CodeSourceError extends Error {
  constructor(override readonly cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause));
    this.name = "CodeSourceError";
  }
}

export class CodePusher {
  private readonly present = new Set<string>();
  private readonly inflight = new Map<string, Promise<void>>();

  constructor(private readonly source: CodeSource) {}

  /** Resolves once the agent has the archive; concurrent callers share one push. */
  ensure(agentId: string, sha256: string, api: ContainerApi): Promise<void> {
    const key = `${agentId}\0${sha256}`;
    if (this.present.has(key)) return Promise.resolve();
    const running = this.inflight.get(key);
    if (running) return running;
    const push = (async () => {
      if (!(await api.hasCode(sha256))) await this.put(api, sha256);
      this.present.add(key);
    })().finally(() => this.inflight.delete(key));
    this.inflight.set(key, push);
    return push;
  }

  /** Agents known to hold the archive. */
  holders(sha256: string): string[] {
    const out: string[] = [];
    for (const key of this.present) {
      const [agentId, sha] = key.split("\0") as [string, string];
      if (sha === sha256) out.push(agentId);
    }
    return out;
  }

  /** The agent went away; it may come back with an empty disk. */
  forgetAgent(agentId: string): void {
    for (const key of this.present) if (key.startsWith(`${agentId}\0`)) this.present.delete(key);
  }

  private async put(api: ContainerApi, sha256: string): Promise<void> {
    let sourceError: unknown;
    const source = this.source;
    async function* guarded(): AsyncGenerator<Uint8Array> {
      try {
        yield* source.open(sha256);
      } catch (e) {
        sourceError = e;
        throw e;
      }
    }
    try {
      await api.putCode(sha256, guarded());
    } catch (e) {
      // The agent saw a broken upload; the real cause is on this side.
      if (sourceError !== undefined) throw new CodeSourceError(sourceError);
      throw e;
    }
  }
}
