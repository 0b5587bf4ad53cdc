// Container lines → the logs stream (BERTH_LOGS, docs/logs.md). Each
// container's lines go out together every batchMs as one message per run of
// lines of one task, on a subject naming workspace, stub, container and task,
// so the coordinator filters with subject filters. A chatty container cannot
// flood NATS: past its per-second budget (lines and bytes) lines are dropped
// and counted, and a "[N lines dropped]" line stands where they were.

import type { NatsConnection, Subscription } from "nats";
import { type ContainerLogBatch, logSubjectToken, subjects } from "../../shared/subjects.ts";
import { RunnerLabels, type TaskOutputMessage, taskOutputSubject } from "../../shared/tasks.ts";
import { type LogStream, TaskAttribution } from "./attribution.ts";

export interface LogShipperOptions {
  agentId: string;
  /** How often each container's lines are sent. @default 100 */
  batchMs?: number;
  /** Lines one container may send per second (bursts up to one second's worth). @default 1000 */
  maxLinesPerSecond?: number;
  /** Bytes of lines one container may send per second. @default 1 MiB */
  maxBytesPerSecond?: number;
  /** Longer lines are cut to this many UTF-16 units (the spool already cuts at 16 KiB). @default 16384 */
  maxLineLength?: number;
  /** How long a runner container's line waits for the task output naming its task. @default 500 */
  attributionHoldMs?: number;
  /** Largest message body; a bigger batch goes out as several. @default 256 KiB */
  maxMessageBytes?: number;
  /** A container with nothing to send is forgotten after this long. @default 60_000 */
  idleForgetMs?: number;
  now?: () => number;
}

export interface ShippedLine {
  containerId: string;
  stream: LogStream;
  line: string;
  ts: number;
  labels: Record<string, string>;
}

interface Pending {
  stream: LogStream;
  line: string;
  ts: number;
  /** When it reached the shipper (by `now`). */
  at: number;
  /** Set on a marker: how many lines were dropped here. */
  dropped?: number;
}

interface ContainerState {
  labels: Record<string, string>;
  pending: Pending[];
  lineTokens: number;
  byteTokens: number;
  refilledAt: number;
  lastSeen: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export class LogShipper {
  private readonly o: Required<Omit<LogShipperOptions, "now">>;
  private readonly now: () => number;
  private readonly containers = new Map<string, ContainerState>();
  private readonly attribution: TaskAttribution;
  private nc?: NatsConnection;
  private outputSub?: Subscription;
  private timer?: NodeJS.Timeout;
  /** Lines dropped over budget since start (for metrics and tests). */
  droppedTotal = 0;

  constructor(o: LogShipperOptions) {
    this.o = {
      batchMs: 100,
      maxLinesPerSecond: 1000,
      maxBytesPerSecond: 1024 * 1024,
      maxLineLength: 16 * 1024,
      attributionHoldMs: 500,
      maxMessageBytes: 256 * 1024,
      idleForgetMs: 60_000,
      ...o,
    };
    this.now = o.now ?? Date.now;
    this.attribution = new TaskAttribution({ now: this.now });
  }

  /**
   * Starts sending over `nc`. The agent's own task output (what the bridge
   * publishes for callers) is read back to learn which task printed what.
   */
  attach(nc: NatsConnection): void {
    this.nc = nc;
    this.outputSub?.unsubscribe();
    this.outputSub = nc.subscribe(taskOutputSubject(this.o.agentId, "*"), {
      callback: (err, m) => {
        if (err) return;
        try {
          const o = JSON.parse(dec.decode(m.data)) as TaskOutputMessage & { containerId?: string };
          if (
            typeof o.taskId === "string" &&
            typeof o.data === "string" &&
            (o.stream === "stdout" || o.stream === "stderr")
          )
            this.taskOutput(o.containerId, o.taskId, o.stream, o.data);
        } catch {
          // Not task output: nothing to learn from it.
        }
      },
    });
    this.timer ??= setInterval(() => this.flush(), this.o.batchMs);
    this.timer.unref();
  }

  /** What task `taskId` wrote, as the runner forwarded it (for attribution only; not sent itself). */
  taskOutput(containerId: string | undefined, taskId: string, stream: LogStream, data: string): void {
    this.attribution.output(containerId, taskId, stream, data);
  }

  /** One line a container printed. */
  line(l: ShippedLine): void {
    const now = this.now();
    let c = this.containers.get(l.containerId);
    if (!c) {
      c = {
        labels: l.labels,
        pending: [],
        lineTokens: this.o.maxLinesPerSecond,
        byteTokens: this.o.maxBytesPerSecond,
        refilledAt: now,
        lastSeen: now,
      };
      this.containers.set(l.containerId, c);
    }
    c.labels = l.labels;
    c.lastSeen = now;
    const line = l.line.length > this.o.maxLineLength ? l.line.slice(0, this.o.maxLineLength) : l.line;
    this.refill(c, now);
    const bytes = Buffer.byteLength(line);
    if (c.lineTokens < 1 || c.byteTokens < bytes) {
      this.droppedTotal++;
      const last = c.pending[c.pending.length - 1];
      if (last?.dropped !== undefined) last.dropped++;
      else c.pending.push({ stream: "stderr", line: "", ts: l.ts, at: now, dropped: 1 });
      return;
    }
    c.lineTokens -= 1;
    c.byteTokens -= bytes;
    c.pending.push({ stream: l.stream, line, ts: l.ts, at: now });
  }

  /** Sends what is ready; `all` sends everything, unattributed lines included (at close). */
  flush(all = false): void {
    const now = this.now();
    this.attribution.expire();
    for (const [id, c] of this.containers) {
      if (c.pending.length === 0) {
        if (now - c.lastSeen > this.o.idleForgetMs) this.containers.delete(id);
        continue;
      }
      this.send(id, c, this.ready(id, c, now, all));
    }
  }

  /** Sends what is left and stops. */
  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.flush(true);
    this.outputSub?.unsubscribe();
    this.outputSub = undefined;
  }

  private refill(c: ContainerState, now: number): void {
    const s = Math.max(0, now - c.refilledAt) / 1000;
    c.refilledAt = now;
    c.lineTokens = Math.min(this.o.maxLinesPerSecond, c.lineTokens + s * this.o.maxLinesPerSecond);
    c.byteTokens = Math.min(this.o.maxBytesPerSecond, c.byteTokens + s * this.o.maxBytesPerSecond);
  }

  /**
   * Takes the container's lines that are ready, in order, each with its
   * task. A runner container's line nobody claimed yet waits (and the lines
   * behind it) up to attributionHoldMs, since its task output may still come.
   */
  private ready(id: string, c: ContainerState, now: number, all: boolean) {
    const runner = c.labels[RunnerLabels.stubId] !== undefined;
    const out: { taskId: string | null; p: Pending }[] = [];
    let i = 0;
    for (; i < c.pending.length; i++) {
      const p = c.pending[i] as Pending;
      if (p.dropped !== undefined || !runner) {
        out.push({ taskId: null, p });
        continue;
      }
      const taskId = this.attribution.match(id, p.stream, p.line);
      if (taskId !== undefined) out.push({ taskId, p });
      else if (all || now - p.at >= this.o.attributionHoldMs) out.push({ taskId: null, p });
      else break;
    }
    c.pending.splice(0, i);
    return out;
  }

  private send(containerId: string, c: ContainerState, lines: { taskId: string | null; p: Pending }[]): void {
    const nc = this.nc;
    if (lines.length === 0 || !nc || nc.isClosed()) return;
    const workspaceId = c.labels[RunnerLabels.workspaceId] ?? "";
    const stubId = c.labels[RunnerLabels.stubId] ?? "";
    let batch: ContainerLogBatch["lines"] = [];
    let bytes = 0;
    let taskId: string | null = null;
    const publish = () => {
      if (batch.length === 0) return;
      const msg: ContainerLogBatch = {
        agentId: this.o.agentId,
        workspaceId,
        stubId,
        containerId,
        taskId,
        lines: batch,
      };
      const subject = subjects.containerLogs(
        this.o.agentId,
        logSubjectToken(workspaceId),
        logSubjectToken(stubId),
        logSubjectToken(containerId),
        logSubjectToken(taskId),
      );
      nc.publish(subject, enc.encode(JSON.stringify(msg)));
      batch = [];
      bytes = 0;
    };
    for (const { taskId: t, p } of lines) {
      const line = p.dropped !== undefined ? `[${p.dropped} lines dropped]` : p.line;
      // Its share of the JSON body: the escaped text and the fields around it.
      const size = Buffer.byteLength(JSON.stringify(line)) + 48;
      if (batch.length > 0 && (t !== taskId || bytes + size > this.o.maxMessageBytes)) publish();
      taskId = t;
      batch.push({ ts: p.ts, stream: p.stream, line });
      bytes += size;
    }
    publish();
  }
}
