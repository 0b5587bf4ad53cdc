// Which task printed a container's line. The runner tees what each task
// writes (sdk/python/berth/runtime/capture.py): to the container's stdout/stderr, which
// the agent reads from the spool, and, tagged with the task id, to the agent
// as task output. Both carry the same text in the same order, so a spool line
// belongs to the task whose output holds an equal line not yet matched. That
// stays right with several tasks at once in one container (workers > 1) and
// whichever of the two copies reaches the agent first; a line no task claims
// (the runner's own, a subprocess writing to fd 1) has no task.

export type LogStream = "stdout" | "stderr";

interface Claim {
  taskId: string;
  /** Undefined when the output did not say which container (it then matches any). */
  containerId: string | undefined;
  stream: LogStream;
  line: string;
  at: number;
}

export interface TaskAttributionOptions {
  /** Claims not matched by a spool line within this time are forgotten. @default 10_000 */
  claimTtlMs?: number;
  /** Claims kept at most (the oldest go first). @default 20_000 */
  maxClaims?: number;
  /** The spool follower's cut for long lines (agent/runtime/logs.ts maxLineBytes). @default 16 KiB */
  spoolLineBytes?: number;
  now?: () => number;
}

export class TaskAttribution {
  private claims: Claim[] = [];
  /** Text after the last newline of a task's output, per task and stream. */
  private readonly carry = new Map<string, { text: string; at: number }>();
  private readonly ttlMs: number;
  private readonly maxClaims: number;
  private readonly spoolLineBytes: number;
  private readonly now: () => number;

  constructor(o: TaskAttributionOptions = {}) {
    this.ttlMs = o.claimTtlMs ?? 10_000;
    this.maxClaims = o.maxClaims ?? 20_000;
    this.spoolLineBytes = o.spoolLineBytes ?? 16 * 1024;
    this.now = o.now ?? Date.now;
  }

  /** A piece of what task `taskId` wrote (not aligned to lines). */
  output(containerId: string | undefined, taskId: string, stream: LogStream, data: string): void {
    const key = `${containerId ?? ""}\n${taskId}\n${stream}`;
    const at = this.now();
    const text = (this.carry.get(key)?.text ?? "") + data;
    const parts = text.split("\n");
    const rest = parts.pop() as string;
    if (rest === "") this.carry.delete(key);
    else this.carry.set(key, { text: rest, at });
    for (const raw of parts) {
      const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
      for (const piece of this.spoolPieces(line))
        this.claims.push({ taskId, containerId, stream, line: piece, at });
    }
    if (this.claims.length > this.maxClaims) this.claims.splice(0, this.claims.length - this.maxClaims);
  }

  /** The task of a spool line, consuming its claim; undefined when no task claims it (yet). */
  match(containerId: string, stream: LogStream, line: string): string | undefined {
    const i = this.claims.findIndex(
      (c) =>
        c.stream === stream &&
        c.line === line &&
        (c.containerId === undefined || c.containerId === containerId),
    );
    if (i < 0) return undefined;
    const [c] = this.claims.splice(i, 1);
    return c?.taskId;
  }

  /** Forgets claims and partial lines older than the TTL. */
  expire(): void {
    const cutoff = this.now() - this.ttlMs;
    if (this.claims.length > 0 && (this.claims[0] as Claim).at < cutoff)
      this.claims = this.claims.filter((c) => c.at >= cutoff);
    for (const [k, v] of this.carry) if (v.at < cutoff) this.carry.delete(k);
  }

  get size(): number {
    return this.claims.length;
  }

  /** How the spool follower cuts a long line: at byte boundaries, decoded piece by piece. */
  private spoolPieces(line: string): string[] {
    if (line.length * 3 <= this.spoolLineBytes) return [line];
    const bytes = Buffer.from(line, "utf8");
    if (bytes.length <= this.spoolLineBytes) return [line];
    const out: string[] = [];
    for (let i = 0; i < bytes.length; i += this.spoolLineBytes)
      out.push(bytes.subarray(i, i + this.spoolLineBytes).toString("utf8"));
    return out;
  }
}
