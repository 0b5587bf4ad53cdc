// Follows a deployment's container logs (GET /api/v1/gateway/deployments/{id}/logs,
// NDJSON) for `berth serve`. Containers come and go, and a stream can end
// (coordinator restart, network): it is opened again until stopped, and the
// lines a reopened stream repeats are skipped.

import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { describeError } from "../../shared/errors.ts";
import type { ApiClient } from "../api-client.ts";

export interface LogLine {
  container_id: string;
  stream: "stdout" | "stderr";
  line: string;
  ts: number;
}

/** What was printed per container: the latest ts and how many lines had it. */
class SeenLines {
  private readonly last = new Map<string, { ts: number; count: number }>();
  private replay = new Map<string, { ts: number; count: number }>();

  /** A reopened stream starts over: lines up to what was printed are repeats. */
  reopened(): void {
    this.replay = new Map([...this.last].map(([k, v]) => [k, { ...v }]));
  }

  isNew(l: LogLine): boolean {
    const r = this.replay.get(l.container_id);
    if (r) {
      if (l.ts < r.ts) return false;
      if (l.ts === r.ts && r.count > 0) {
        r.count--;
        return false;
      }
      this.replay.delete(l.container_id);
    }
    const seen = this.last.get(l.container_id);
    if (seen && seen.ts === l.ts) seen.count++;
    else this.last.set(l.container_id, { ts: l.ts, count: 1 });
    return true;
  }
}

export interface FollowOptions {
  print(l: LogLine): void;
  /** A stream failed or could not be opened (said once per outage). */
  warn(message: string): void;
  tail?: number;
  retryMs?: number;
}

/** Runs until signal aborts. */
export async function followDeploymentLogs(
  api: ApiClient,
  deploymentId: string,
  signal: AbortSignal,
  o: FollowOptions,
): Promise<void> {
  const seen = new SeenLines();
  const path = `/api/v1/gateway/deployments/${encodeURIComponent(deploymentId)}/logs?follow=1&tail=${o.tail ?? 1000}`;
  let warned = false;
  while (!signal.aborted) {
    try {
      const res = await api.openStream(path, signal);
      warned = false;
      if (res.body) {
        const lines = createInterface({
          input: Readable.fromWeb(res.body as import("node:stream/web").ReadableStream),
          crlfDelay: Number.POSITIVE_INFINITY,
        });
        for await (const text of lines) {
          if (!text.trim()) continue;
          let l: LogLine;
          try {
            l = JSON.parse(text) as LogLine;
          } catch {
            continue;
          }
          if (seen.isNew(l)) o.print(l);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      if (!warned) o.warn(`log stream: ${describeError(e)}; reconnecting`);
      warned = true;
    }
    seen.reopened();
    await sleep(o.retryMs ?? 1000, undefined, { signal }).catch(() => undefined);
  }
}

/** `ctr-1a2b3c4d | line`, stderr lines on stderr. */
export function printLogLine(l: LogLine, stdout = process.stdout, stderr = process.stderr): void {
  const out = l.stream === "stderr" ? stderr : stdout;
  out.write(`${l.container_id.slice(0, 12)} | ${l.line}\n`);
}
