import { type ChildProcess, execFile, spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, statSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { promisify } from "node:util";
import { BerthError } from "../../shared/errors.ts";

const execFileP = promisify(execFile);

export interface RuncListEntry {
  id: string;
  pid: number;
  status: "created" | "running" | "pausing" | "paused" | "stopped";
  bundle: string;
  created: string;
}

/**
 * An OCI runtime's CLI (runc, crun or runsc: they share runc's commands),
 * bound to one state root so test runs and agents never share state.
 */
/** New cgroup limits for a running container, as `runc update` takes them. */
export interface CgroupUpdate {
  cpuQuotaUs: number;
  cpuPeriodUs: number;
  cpuShares: number;
  memoryBytes: number;
  memorySwapBytes?: number;
  pidsLimit: number;
}

export class Runc {
  /** Global flags before the command, --root included. */
  readonly globalArgs: string[];
  /** `run --keep` exists (runc); without it the runtime deletes the container on exit. */
  readonly keep: boolean;

  constructor(
    readonly bin: string,
    readonly root: string,
    opts: { globalArgs?: string[]; keep?: boolean } = {},
  ) {
    this.globalArgs = opts.globalArgs ?? ["--root", root];
    this.keep = opts.keep ?? true;
  }

  /** The runtime's name for messages (the binary's base name). */
  get name(): string {
    return this.bin.slice(this.bin.lastIndexOf("/") + 1);
  }

  private async exec(args: string[]): Promise<string> {
    try {
      const { stdout } = await execFileP(this.bin, [...this.globalArgs, ...args], {
        maxBuffer: 16 * 1024 * 1024,
      });
      return stdout;
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new Error(`${this.name} ${args[0]} failed: ${(err.stderr || err.message).trim()}`);
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
      if (!/does not exist|not exist|not found|no such/i.test((e as Error).message)) throw e;
    }
  }

  /**
   * `runc update`: new cgroup limits for a running container (a pre-warmed
   * runner given to its stub). `memorySwap` only where the host accounts swap.
   */
  async update(id: string, l: CgroupUpdate): Promise<void> {
    await this.exec([
      "update",
      "--cpu-quota",
      String(l.cpuQuotaUs),
      "--cpu-period",
      String(l.cpuPeriodUs),
      "--cpu-share",
      String(l.cpuShares),
      "--memory",
      String(l.memoryBytes),
      ...(l.memorySwapBytes === undefined ? [] : ["--memory-swap", String(l.memorySwapBytes)]),
      "--pids-limit",
      String(l.pidsLimit),
      id,
    ]);
  }

  /**
   * argv for the long-lived waiter: `sh` runs `runc run --keep` in the
   * foreground (runc stays the container's parent and subreaper) and writes
   * runc's exit status (the container's, 128+signo for a signal) to exitFile.
   * --keep leaves the stopped container and its cgroup, so OOM counters can
   * still be read after the exit. sh and runc run in their own session and
   * survive an agent restart.
   *
   * With `restore`, runc restores the checkpoint instead, also in the
   * foreground (no --detach), so the exit status reaches exitFile the same
   * way. `runc restore` has no --keep: runc deletes the container when it
   * exits, and its OOM counters go with it.
   */
  waiterArgv(o: {
    bundle: string;
    id: string;
    pidFile: string;
    exitFile: string;
    logFile: string;
    restore?: RestoreImages;
    extraGlobalArgs?: string[];
  }): string[] {
    const script = 'exitfile=$1; shift; "$@"; echo $? > "$exitfile"';
    const start = o.restore
      ? ["restore", "--image-path", o.restore.imagePath, "--work-path", o.restore.workPath]
      : this.keep
        ? ["run", "--keep"]
        : ["run"];
    return [
      "-c",
      script,
      "berth-waiter",
      o.exitFile,
      this.bin,
      ...this.globalArgs,
      ...(o.extraGlobalArgs ?? []),
      "--log",
      o.logFile,
      "--log-format",
      "json",
      ...start,
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

/** Where `runc restore` reads a checkpoint's CRIU images and keeps its own work files and logs. */
export interface RestoreImages {
  imagePath: string;
  workPath: string;
}

/**
 * The restore dirs of a container whose bundle is `bundle`: the checkpoint
 * must be a directory already (invalid_request for a path that is not
 * absolute, failed_precondition for one that is not there); CRIU's work
 * dir is made inside the bundle, so its logs go with the container.
 */
export function restoreImages(checkpointDir: string, bundle: string): RestoreImages {
  if (typeof checkpointDir !== "string" || !isAbsolute(checkpointDir) || checkpointDir.includes("\0")) {
    throw new BerthError(
      "invalid_request",
      `restoreFrom must be an absolute path, got ${JSON.stringify(checkpointDir)}`,
      { field: "restoreFrom" },
    );
  }
  let isDir = false;
  try {
    isDir = statSync(checkpointDir).isDirectory();
  } catch {
    // Reported below, naming the path.
  }
  if (!isDir) {
    throw new BerthError(
      "failed_precondition",
      `restoreFrom ${checkpointDir} is not a directory of CRIU images (runc checkpoint --image-path)`,
      { field: "restoreFrom" },
    );
  }
  const workPath = join(bundle, "criu-work");
  mkdirSync(workPath, { recursive: true, mode: 0o700 });
  return { imagePath: checkpointDir, workPath };
}

export interface WaiterFiles {
  bundle: string;
  id: string;
  pidFile: string;
  exitFile: string;
  logFile: string;
  /** `runc restore` from these instead of `runc run`. */
  restore?: RestoreImages;
  /** Global flags for this container's start only (runsc --nvproxy). */
  extraGlobalArgs?: string[];
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
