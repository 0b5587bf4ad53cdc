import { type ChildProcess, execFile, spawn } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

export interface RuncListEntry {
  id: string;
  pid: number;
  status: "created" | "running" | "pausing" | "paused" | "stopped";
  bundle: string;
  created: string;
}

/** The runc CLI, bound to one state root so test runs and agents never share state. */
export class Runc {
  constructor(
    readonly bin: string,
    readonly root: string,
  ) {}

  private async exec(args: string[]): Promise<string> {
    try {
      const { stdout } = await execFileP(this.bin, ["--root", this.root, ...args], {
        maxBuffer: 16 * 1024 * 1024,
      });
      return stdout;
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new Error(`runc ${args[0]} failed: ${(err.stderr || err.message).trim()}`);
    }
  }

  async list(): Promise<RuncListEntry[]> {
    const out = await this.exec(["list", "--format", "json"]);
    const parsed = JSON.parse(out.trim() || "null") as RuncListEntry[] | null;
    return parsed ?? [];
  }

  /** `runc delete --force`; a container runc does not know is not an error. */
  async deleteForce(id: string): Promise<void> {
    try {
      await this.exec(["delete", "--force", id]);
    } catch (e) {
      if (!/does not exist|not exist/i.test((e as Error).message)) throw e;
    }
  }

  /**
   * argv for the long-lived waiter: `sh` runs `runc run --keep` in the
   * foreground (runc stays the container's parent and subreaper) and writes
   * runc's exit status (the container's, 128+signo for a signal) to exitFile.
   * --keep leaves the stopped container and its cgroup, so OOM counters can
   * still be read after the exit. sh and runc run in their own session and
   * survive an agent restart.
   */
  waiterArgv(o: {
    bundle: string;
    id: string;
    pidFile: string;
    exitFile: string;
    logFile: string;
  }): string[] {
    const script = 'exitfile=$1; shift; "$@"; echo $? > "$exitfile"';
    return [
      "-c",
      script,
      "berth-waiter",
      o.exitFile,
      this.bin,
      "--root",
      this.root,
      "--log",
      o.logFile,
      "--log-format",
      "json",
      "run",
      "--keep",
      "--bundle",
      o.bundle,
      "--pid-file",
      o.pidFile,
      o.id,
    ];
  }

  /** Starts the waiter in its own session; the caller watches its exit. */
  spawnWaiter(f: WaiterFiles): ChildProcess {
    const outFd = openSync(f.stdout, "a");
    const errFd = openSync(f.stderr, "a");
    try {
      const child = spawn("/bin/sh", this.waiterArgv(f), { detached: true, stdio: ["ignore", outFd, errFd] });
      child.unref();
      return child;
    } finally {
      closeSync(outFd);
      closeSync(errFd);
    }
  }
}

export interface WaiterFiles {
  bundle: string;
  id: string;
  pidFile: string;
  exitFile: string;
  logFile: string;
  /** Log spools, opened O_APPEND and handed to runc as its stdout/stderr. */
  stdout: string;
  stderr: string;
}

/** Error messages runc logged (its --log file, JSON lines), newest last. */
export function readRuncErrors(logFile: string): string[] {
  let text: string;
  try {
    text = readFileSync(logFile, "utf8");
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    try {
      const entry = JSON.parse(line) as { level?: string; msg?: string };
      if ((entry.level === "error" || entry.level === "fatal") && entry.msg) out.push(entry.msg);
    } catch {
      out.push(line);
    }
  }
  return out;
}
