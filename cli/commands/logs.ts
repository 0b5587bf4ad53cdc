// `berth logs` (docs/logs.md): what the workspace's containers printed,
// from GET /api/v1/logs/{ws} (every page) or, with --follow, live from
// /api/v1/logs/{ws}/stream, reconnecting after the last line seen.

import type { LogLine } from "../../coordinator/logs/query.ts";
import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";

/** One line as `GET /api/v1/logs/{ws}` answers it. */
export type LogLineJson = LogLine;

export interface LogsOptions {
  follow?: boolean;
  stub?: string;
  task?: string;
  container?: string;
  /** ISO 8601, or a duration back from now: 90s, 10m, 2h, 3d. */
  since?: string;
  grep?: string;
  json?: boolean;
}

/** Without --since (and without --task, whose lines are wanted whenever they were printed), the last hour. */
const DEFAULT_SINCE = "1h";
const PAGE = 1000;
const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `--since` as ISO 8601: a duration counts back from `now`. */
export function sinceToIso(since: string, now = Date.now()): string {
  const m = /^(\d+(?:\.\d+)?)([smhd])$/.exec(since.trim());
  if (m) return new Date(now - Number(m[1]) * (UNITS[m[2] as string] as number)).toISOString();
  const t = Date.parse(since);
  if (Number.isNaN(t))
    throw new BerthError(
      "invalid_request",
      `--since ${JSON.stringify(since)}: use an ISO 8601 time or a duration such as 10m, 2h, 3d`,
    );
  return new Date(t).toISOString();
}

export function formatLogLine(l: LogLineJson): string {
  const who = l.task_id ? `${l.container_id} ${l.task_id}` : l.container_id;
  return `${l.timestamp} ${who}${l.stream === "stderr" ? " !" : ""} ${l.line}`;
}

function query(o: LogsOptions, extra: Record<string, string>): string {
  const p = new URLSearchParams();
  if (o.stub) p.set("stub_id", o.stub);
  if (o.task) p.set("task_id", o.task);
  if (o.container) p.set("container_id", o.container);
  const since = o.since ?? (o.task || o.follow ? undefined : DEFAULT_SINCE);
  if (since) p.set("since", sinceToIso(since));
  if (o.grep) p.set("text", o.grep);
  for (const [k, v] of Object.entries(extra)) p.set(k, v);
  const s = p.toString();
  return s ? `?${s}` : "";
}

/** Prints the lines (all pages), then, with follow, new ones until `signal` aborts. */
export async function runLogs(
  api: ApiClient,
  o: LogsOptions,
  write: (text: string) => void,
  signal: AbortSignal,
): Promise<void> {
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  const base = `/api/v1/logs/${encodeURIComponent(ws.external_id)}`;
  const print = (l: LogLineJson) => write(`${o.json ? JSON.stringify(l) : formatLogLine(l)}\n`);
  if (!o.follow) {
    let cursor: string | null = null;
    do {
      const page: { lines: LogLineJson[]; next_cursor: string | null } = await api.request(
        "GET",
        `${base}${query(o, { limit: String(PAGE), ...(cursor ? { cursor } : {}) })}`,
      );
      for (const l of page.lines) print(l);
      cursor = page.next_cursor;
    } while (cursor && !signal.aborted);
    return;
  }
  let last: string | undefined;
  let delay = 500;
  while (!signal.aborted) {
    try {
      const res = await api.openStream(`${base}/stream${query(o, last ? { cursor: last } : {})}`, signal);
      delay = 500;
      for await (const l of sseLines(res)) {
        last = l.id;
        print(l);
      }
    } catch (e) {
      if (signal.aborted) return;
      // Only a lost connection is retried; a refusal (bad filter, token) is the answer.
      if (!(e instanceof BerthError) || e.code !== "unavailable") throw e;
    }
    if (signal.aborted) return;
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}

/** The `data` of each server-sent event of a logs stream. */
async function* sseLines(res: Response): AsyncGenerator<LogLineJson> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let at = buf.indexOf("\n\n");
      while (at >= 0) {
        const block = buf.slice(0, at);
        buf = buf.slice(at + 2);
        at = buf.indexOf("\n\n");
        const data = block
          .split("\n")
          .filter((l) => l.startsWith("data: "))
          .map((l) => l.slice(6))
          .join("\n");
        if (data) yield JSON.parse(data) as LogLineJson;
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

export function logsCommand(program: Command): void {
  program
    .command("logs")
    .description("what the workspace's containers printed (stdout and stderr, `!` marks stderr)")
    .option("-f, --follow", "keep printing new lines until Ctrl-C")
    .option("--stub <id>", "only lines of this stub (stub-...)")
    .option("--task <id>", "only lines this task printed (task-...)")
    .option("--container <id>", "only lines of this container (ctr-...)")
    .option(
      "--since <when>",
      "ISO 8601 time or duration back from now (90s, 10m, 2h, 3d); default 1h, or all of a --task",
    )
    .option("--grep <text>", "only lines containing this text (case-insensitive)")
    .option("--json", "print each line as JSON (one object a line)")
    .action(async (o: LogsOptions) => {
      const abort = new AbortController();
      const stop = () => abort.abort();
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
      try {
        await runLogs(ApiClient.fromEnv(), o, (t) => process.stdout.write(t), abort.signal);
      } finally {
        process.off("SIGINT", stop);
        process.off("SIGTERM", stop);
      }
    });
}
