// Reading container log lines (docs/logs.md) out of the JetStream stream
// BERTH_LOGS, where agents store them in batches on
// `berth.agent.{agent}.logs.{ws}.{stub}.{container}.{task|_}`. Workspace,
// stub, container and task are subject filters (the server skips the rest);
// time and text are checked here. A line's id is `{stream seq}-{index in its
// batch}`: pages resume after one, and so does a live follow.

import {
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamClient,
  type JsMsg,
  type NatsConnection,
} from "nats";
import type { Logger } from "pino";
import { BerthError, describeError, invalid } from "../../shared/errors.ts";
import { type ContainerLogBatch, LOG_TOKEN, streams, subjects } from "../../shared/subjects.ts";
import { scanStored } from "../streams/index.ts";

export const DEFAULT_LOG_LIMIT = 100;
export const MAX_LOG_LIMIT = 1000;
/** Stored messages one page reads at most; a page cut short by it still has a next_cursor. */
const MAX_SCANNED = 20_000;
/** Lines are stored this long after they were printed at most, barring NATS outages (batching, attribution hold). */
const STORE_LAG_MS = 60_000;

/** Whose lines: the internal id filters, the external id is what lines show. */
export interface LogWorkspace {
  id: string;
  externalId: string;
}

export interface LogFilters {
  stubId?: string;
  containerId?: string;
  taskId?: string;
  /** ISO 8601: lines printed at or after this time. */
  since?: string;
  /** ISO 8601: lines printed before this time (queries only). */
  until?: string;
  /** Case-insensitive substring of the line. */
  text?: string;
}

export interface LogQueryInput extends LogFilters {
  /** @default 100, at most 1000 */
  limit?: number;
  /** next_cursor of the previous page, or a line id. */
  cursor?: string;
}

/** One line as the API shows it. */
export interface LogLine {
  /** Cursor: resume after this line. */
  id: string;
  timestamp: string;
  workspace_id: string;
  stub_id: string;
  container_id: string;
  task_id: string | null;
  stream: "stdout" | "stderr";
  line: string;
}

export interface LogPage {
  lines: LogLine[];
  /** Null on the last page. */
  next_cursor: string | null;
}

export interface LogQueryOptions {
  nats: NatsConnection;
  log: Logger;
}

interface Position {
  seq: number;
  index: number;
}

interface Checked {
  filter: string;
  since?: number;
  until?: number;
  text?: string;
  taskId?: string;
  after?: Position;
}

const dec = new TextDecoder();

export function parseLogCursor(cursor: string): Position {
  const m = /^(\d{1,15})-(\d{1,6})$/.exec(cursor);
  if (!m) throw invalid(`cursor ${JSON.stringify(cursor)} is not a log line id (such as "42-0")`);
  return { seq: Number(m[1]), index: Number(m[2]) };
}

function parseTime(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const ms = Date.parse(v);
  if (Number.isNaN(ms)) throw invalid(`${name} ${JSON.stringify(v)} is not an ISO 8601 time`);
  return ms;
}

function checkId(name: string, v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  if (!LOG_TOKEN.test(v))
    throw invalid(`${name} ${JSON.stringify(v)} is not an id (letters, digits, - and _)`);
  return v;
}

export class LogQuery {
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly log: Logger;

  constructor(o: LogQueryOptions) {
    this.nc = o.nats;
    this.js = o.nats.jetstream();
    this.log = o.log;
  }

  /** One page of the workspace's lines, in the order they were stored. */
  async query(ws: LogWorkspace, q: LogQueryInput = {}): Promise<LogPage> {
    const limit = q.limit ?? DEFAULT_LOG_LIMIT;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LOG_LIMIT)
      throw invalid(`limit must be an integer from 1 to ${MAX_LOG_LIMIT}`);
    const c = this.check(ws, q, q.cursor);
    const lines: LogLine[] = [];
    let last: Position | undefined;
    let more = false;
    let scanned = 0;
    await this.scan(c, (m, batch, pending) => {
      scanned++;
      // Lines printed after `until` are stored after it too: nothing later can match.
      if (c.until !== undefined && m.info.timestampNanos / 1e6 > c.until + STORE_LAG_MS) return false;
      for (let i = 0; i < batch.lines.length; i++) {
        if (c.after && m.seq === c.after.seq && i <= c.after.index) continue;
        last = { seq: m.seq, index: i };
        const line = this.matching(ws, c, batch, m.seq, i);
        if (!line) continue;
        lines.push(line);
        if (lines.length >= limit) {
          more = pending > 0 || i < batch.lines.length - 1;
          return false;
        }
      }
      if (scanned >= MAX_SCANNED && pending > 0) {
        more = true;
        return false;
      }
      return true;
    });
    const at = last as Position | undefined;
    return { lines, next_cursor: more && at ? `${at.seq}-${at.index}` : null };
  }

  /**
   * The workspace's lines from now on (or after the line `cursor`, or from
   * `since`), live, until `signal` aborts or the returned iterator is closed.
   */
  async follow(
    ws: LogWorkspace,
    filters: Omit<LogFilters, "until"> = {},
    cursor?: string,
    signal?: AbortSignal,
  ): Promise<AsyncIterableIterator<LogLine>> {
    const c = this.check(ws, filters, cursor);
    const consumer = await this.js.consumers.get(streams.logs.name, {
      filterSubjects: c.filter,
      ...this.start(c, DeliverPolicy.New),
    });
    const msgs: ConsumerMessages = await consumer.consume({ max_messages: 256 });
    const close = () => void msgs.close().catch(() => {});
    if (signal?.aborted) close();
    signal?.addEventListener("abort", close, { once: true });
    const self = this;
    async function* lines(): AsyncGenerator<LogLine> {
      try {
        for await (const m of msgs) {
          const batch = self.decode(m);
          if (!batch) continue;
          for (let i = 0; i < batch.lines.length; i++) {
            if (c.after && m.seq === c.after.seq && i <= c.after.index) continue;
            const line = self.matching(ws, c, batch, m.seq, i);
            if (line) yield line;
          }
        }
      } finally {
        signal?.removeEventListener("abort", close);
        close();
      }
    }
    return lines();
  }

  private check(ws: LogWorkspace, f: LogFilters, cursor: string | undefined): Checked {
    const stubId = checkId("stub_id", f.stubId);
    const containerId = checkId("container_id", f.containerId);
    const taskId = checkId("task_id", f.taskId);
    const since = parseTime("since", f.since);
    const until = parseTime("until", f.until);
    if (f.text !== undefined && f.text.length > 1000) throw invalid("text is longer than 1000 characters");
    if (!LOG_TOKEN.test(ws.id))
      throw new BerthError("internal", `workspace id ${ws.id} cannot name a subject`);
    return {
      filter: subjects.workspaceLogs(ws.id, {
        ...(stubId ? { stubId } : {}),
        ...(containerId ? { containerId } : {}),
        ...(taskId ? { taskId } : {}),
      }),
      ...(since !== undefined ? { since } : {}),
      ...(until !== undefined ? { until } : {}),
      ...(f.text ? { text: f.text.toLowerCase() } : {}),
      ...(taskId ? { taskId } : {}),
      ...(cursor !== undefined ? { after: parseLogCursor(cursor) } : {}),
    };
  }

  private start(c: Checked, otherwise: DeliverPolicy) {
    if (c.after) return { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: c.after.seq };
    // Stored times are never earlier than print times, so starting at `since` misses none.
    if (c.since !== undefined)
      return { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(c.since).toISOString() };
    return { deliver_policy: otherwise };
  }

  /** The line as the API shows it, when it passes the filters the subject could not apply. */
  private matching(
    ws: LogWorkspace,
    c: Checked,
    b: ContainerLogBatch,
    seq: number,
    i: number,
  ): LogLine | undefined {
    const l = b.lines[i];
    if (!l || b.workspaceId !== ws.id) return undefined;
    if (c.taskId !== undefined && b.taskId !== c.taskId) return undefined;
    if (c.since !== undefined && l.ts < c.since) return undefined;
    if (c.until !== undefined && l.ts >= c.until) return undefined;
    if (c.text !== undefined && !l.line.toLowerCase().includes(c.text)) return undefined;
    return {
      id: `${seq}-${i}`,
      timestamp: new Date(l.ts).toISOString(),
      workspace_id: ws.externalId,
      stub_id: b.stubId,
      container_id: b.containerId,
      task_id: b.taskId,
      stream: l.stream,
      line: l.line,
    };
  }

  /**
   * Reads stored batches matching the filter in order through a short-lived
   * consumer until `visit` returns false or none are left. `pending` is how
   * many more match after this one.
   */
  private async scan(
    c: Checked,
    visit: (m: JsMsg, b: ContainerLogBatch, pending: number) => boolean,
  ): Promise<void> {
    const nats = { nc: this.nc, js: this.js };
    await scanStored(nats, streams.logs.name, c.filter, this.start(c, DeliverPolicy.All), (m, pending) => {
      const b = this.decode(m);
      return !b || visit(m, b, pending);
    });
  }

  private decode(m: JsMsg): ContainerLogBatch | undefined {
    try {
      const b = JSON.parse(dec.decode(m.data)) as ContainerLogBatch;
      if (typeof b.workspaceId === "string" && Array.isArray(b.lines)) return b;
    } catch (e) {
      this.log.warn(
        { seq: m.seq, err: describeError(e) },
        "logs: skipping a message that is not a log batch",
      );
      return undefined;
    }
    this.log.warn({ seq: m.seq }, "logs: skipping a message that is not a log batch");
    return undefined;
  }
}
