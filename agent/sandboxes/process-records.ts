// A small file per sandbox container naming the processes the agent started
// in it and how each ended, so that an agent restart answers a true status
// for them instead of "no such process": the exec sessions (and the output
// buffers) go with the old agent process, so what was running then is
// recorded as `error`, "the agent restarted while it ran"; the pids go on
// from where they were. Written whole (temp file, rename) on each start and end.

import { mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ProcessInfo } from "../../api/index.ts";

export const AGENT_RESTARTED = "the agent restarted while it ran";

interface RecordFile {
  next: number;
  processes: ProcessInfo[];
}

export interface RecoveredProcesses extends RecordFile {
  containerId: string;
}

const SUFFIX = ".processes.json";

export class ProcessRecords {
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  write(containerId: string, next: number, processes: ProcessInfo[]): void {
    const path = this.pathOf(containerId);
    const tmp = `${path}.tmp`;
    writeFileSync(tmp, JSON.stringify({ next, processes } satisfies RecordFile));
    renameSync(tmp, path);
  }

  remove(containerId: string): void {
    rmSync(this.pathOf(containerId), { force: true });
  }

  /** The records of live containers, their running processes marked ended by the restart; the rest removed. */
  recover(live: Set<string>, now: number): RecoveredProcesses[] {
    const out: RecoveredProcesses[] = [];
    for (const name of readdirSync(this.dir)) {
      const path = join(this.dir, name);
      if (!name.endsWith(SUFFIX)) {
        rmSync(path, { force: true }); // a temp file a crash left
        continue;
      }
      const containerId = name.slice(0, -SUFFIX.length);
      const rec = live.has(containerId) ? readRecord(path) : undefined;
      if (!rec) {
        rmSync(path, { force: true });
        continue;
      }
      const processes = rec.processes.map((p) =>
        p.status === "running"
          ? { ...p, status: "error" as const, exitCode: 255, endedAt: now, error: AGENT_RESTARTED }
          : p,
      );
      this.write(containerId, rec.next, processes);
      out.push({ containerId, next: rec.next, processes });
    }
    return out;
  }

  private pathOf(containerId: string): string {
    return join(this.dir, `${containerId}${SUFFIX}`);
  }
}

/** A record as written, or undefined for one that cannot be read (it is dropped: the pids restart at 1). */
function readRecord(path: string): RecordFile | undefined {
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as Partial<RecordFile>;
    if (!Number.isInteger(r.next) || !Array.isArray(r.processes)) return undefined;
    return { next: r.next as number, processes: r.processes };
  } catch {
    return undefined;
  }
}
