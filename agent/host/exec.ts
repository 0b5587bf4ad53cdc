// A process started inside a running container with `runc exec`. runc
// builds the process from the container's own config (capabilities,
// no_new_privs, seccomp, namespaces, cgroup, rlimits) and only the flags
// below change args, env, cwd and user, so an exec'd process is confined
// exactly like the container's init. Without a tty runc copies the process's
// pipes to its own stdio; with one, runc (in the foreground) makes the
// container's pty itself and copies it to its own stdin/stdout, which is a
// node-pty terminal here, so resize works by runc forwarding SIGWINCH.

import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { constants } from "node:os";
import { basename, join } from "node:path";
import { BerthError, describeError } from "../../shared/errors.ts";
import type { HostLogger } from "./options.ts";
import type { ExecOutput, ExecRequest, ExecSession } from "../../api/index.ts";
import { parseUser } from "./request.ts";

const ENV_KEY_RE = /^[^=\0]+$/;

export interface ExecTarget {
  /** The OCI runtime's binary (runc, crun or runsc). */
  runc: string;
  runcRoot: string;
  /** Global flags before `exec`, --root included. @default ["--root", runcRoot] */
  globalArgs?: string[];
  /**
   * runsc: exec'd processes live in gVisor's kernel and have no host pid;
   * they are signalled with `runsc kill --pid` by their pid inside the sandbox.
   */
  sandboxPids?: boolean;
  containerId: string;
  /** For the pid file; removed when the process ends. */
  tmpDir: string;
}

export interface ResolvedExecRequest {
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  user?: { uid: number; gid: number };
  tty: boolean;
}

export function resolveExecRequest(req: ExecRequest): ResolvedExecRequest {
  if (typeof req !== "object" || req === null)
    throw new BerthError("invalid_request", "exec needs a request");
  const args = req.args;
  if (
    !Array.isArray(args) ||
    args.length === 0 ||
    args.some((a) => typeof a !== "string" || a.includes("\0"))
  ) {
    throw new BerthError("invalid_request", "exec args must be a non-empty list of strings", {
      field: "args",
    });
  }
  if (args[0] === "") throw new BerthError("invalid_request", "exec args[0] must not be empty");
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.env ?? {})) {
    if (!ENV_KEY_RE.test(k) || typeof v !== "string" || v.includes("\0")) {
      throw new BerthError("invalid_request", `exec env ${JSON.stringify(k)} is invalid`, { field: "env" });
    }
    env[k] = v;
  }
  if (req.cwd !== undefined && (typeof req.cwd !== "string" || !req.cwd.startsWith("/"))) {
    throw new BerthError(
      "invalid_request",
      `exec cwd must be an absolute path, got ${JSON.stringify(req.cwd)}`,
    );
  }
  if (req.tty !== undefined && typeof req.tty !== "boolean") {
    throw new BerthError("invalid_request", "exec tty must be a boolean");
  }
  const out: ResolvedExecRequest = { args: [...args], env, tty: req.tty === true };
  if (req.cwd !== undefined) out.cwd = req.cwd;
  if (req.user !== undefined) out.user = parseUser(req.user, "exec user");
  return out;
}

export function runcExecArgv(t: ExecTarget, r: ResolvedExecRequest, pidFile: string): string[] {
  const argv = [
    ...(t.globalArgs ?? ["--root", t.runcRoot]),
    "exec",
    t.sandboxPids ? "--internal-pid-file" : "--pid-file",
    pidFile,
  ];
  if (r.tty) argv.push("--tty");
  if (r.cwd) argv.push("--cwd", r.cwd);
  if (r.user) argv.push("--user", `${r.user.uid}:${r.user.gid}`);
  for (const [k, v] of Object.entries(r.env)) argv.push("--env", `${k}=${v}`);
  argv.push(t.containerId, ...r.args);
  return argv;
}

/** Output chunks in arrival order; ends when every source has ended. */
export class OutputQueue implements AsyncIterable<ExecOutput> {
  private readonly items: ExecOutput[] = [];
  private waiting?: () => void;
  private open: number;

  constructor(sources: number) {
    this.open = sources;
  }

  push(item: ExecOutput): void {
    this.items.push(item);
    this.waiting?.();
  }

  end(): void {
    this.open = Math.max(0, this.open - 1);
    this.waiting?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ExecOutput> {
    for (;;) {
      const item = this.items.shift();
      if (item) {
        yield item;
        continue;
      }
      if (this.open === 0) return;
      await new Promise<void>((resolve) => {
        this.waiting = resolve;
      });
      this.waiting = undefined;
    }
  }
}

function signalExitCode(signal: NodeJS.Signals | string | null | undefined): number {
  const no = signal ? (constants.signals as Record<string, number>)[signal] : undefined;
  return 128 + (no ?? 0);
}

/** Kills the exec'd process itself (runc cannot forward SIGKILL), else runc. */
function killer(
  t: ExecTarget,
  pidFile: string,
  fallback: (sig: NodeJS.Signals) => void,
  done: () => boolean,
) {
  return (signal: NodeJS.Signals = "SIGKILL") => {
    if (done()) return;
    let pid = 0;
    try {
      pid = Number(readFileSync(pidFile, "utf8").trim());
    } catch {
      pid = 0;
    }
    if (pid > 0 && t.sandboxPids) {
      const args = [
        ...(t.globalArgs ?? ["--root", t.runcRoot]),
        "kill",
        "--pid",
        String(pid),
        t.containerId,
        signal,
      ];
      // Fails only when the process is gone: the runtime is about to report its exit.
      execFile(t.runc, args, () => {});
      return;
    }
    if (pid > 0) {
      try {
        process.kill(pid, signal);
        return;
      } catch {
        // Gone already: runc is about to report its exit.
      }
    }
    fallback(signal);
  };
}

export function startPipeExec(t: ExecTarget, r: ResolvedExecRequest): ExecSession {
  const dir = mkdtempSync(join(t.tmpDir, "exec-"));
  const pidFile = join(dir, "pid");
  const child: ChildProcess = spawn(t.runc, runcExecArgv(t, r, pidFile), { stdio: ["pipe", "pipe", "pipe"] });
  const output = new OutputQueue(2);
  child.stdout?.on("data", (data: Buffer) => output.push({ stream: "stdout", data: new Uint8Array(data) }));
  child.stderr?.on("data", (data: Buffer) => output.push({ stream: "stderr", data: new Uint8Array(data) }));
  child.stdout?.on("close", () => output.end());
  child.stderr?.on("close", () => output.end());
  // A process that exits without reading its stdin makes our writes fail with EPIPE: not an error here.
  child.stdin?.on("error", () => {});
  let finished = false;
  const exit = new Promise<number>((resolve) => {
    child.on("error", (e) => {
      finished = true;
      output.push({ stream: "stderr", data: new TextEncoder().encode(`runc exec failed: ${e.message}\n`) });
      output.end();
      output.end();
      rmSync(dir, { recursive: true, force: true });
      resolve(127);
    });
    child.on("close", (code, signal) => {
      finished = true;
      rmSync(dir, { recursive: true, force: true });
      resolve(code ?? signalExitCode(signal));
    });
  });
  return {
    output,
    writeStdin: (data) => {
      if (child.stdin?.writable) child.stdin.write(data);
    },
    closeStdin: () => {
      child.stdin?.end();
    },
    kill: killer(
      t,
      pidFile,
      (sig) => child.kill(sig),
      () => finished,
    ),
    exit,
  };
}

type PtyModule = typeof import("node-pty");

/** node-pty is a native addon: loaded on the first tty exec only. */
async function loadPty(): Promise<PtyModule> {
  try {
    const mod = (await import("node-pty")) as PtyModule & { default?: PtyModule };
    return mod.default ?? mod;
  } catch (e) {
    throw new BerthError(
      "failed_precondition",
      `exec with a tty needs the node-pty addon, which failed to load: ${(e as Error).message}`,
    );
  }
}

export async function startTtyExec(
  t: ExecTarget,
  r: ResolvedExecRequest,
  size: { cols: number; rows: number } = { cols: 80, rows: 24 },
): Promise<ExecSession> {
  const pty = await loadPty();
  const dir = mkdtempSync(join(t.tmpDir, "exec-"));
  const pidFile = join(dir, "pid");
  const term = pty.spawn(t.runc, runcExecArgv(t, r, pidFile), {
    name: "xterm",
    cols: size.cols,
    rows: size.rows,
    env: { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin" },
  });
  const output = new OutputQueue(1);
  term.onData((s: string) => output.push({ stream: "stdout", data: new TextEncoder().encode(s) }));
  let finished = false;
  const exit = new Promise<number>((resolve) => {
    term.onExit(({ exitCode, signal }) => {
      finished = true;
      output.end();
      rmSync(dir, { recursive: true, force: true });
      resolve(signal ? 128 + signal : exitCode);
    });
  });
  return {
    output,
    writeStdin: (data) => {
      if (!finished) term.write(Buffer.from(data).toString("utf8"));
    },
    // A terminal has no separate end of input: send the EOF character (^D).
    closeStdin: () => {
      if (!finished) term.write("\x04");
    },
    resize: (cols, rows) => {
      if (!finished) term.resize(cols, rows);
    },
    kill: killer(
      t,
      pidFile,
      (sig) => term.kill(sig),
      () => finished,
    ),
    exit,
  };
}

/**
 * A previous agent's exec scratch dirs go. An exec it started may still be
 * running and write into its dir while we remove it (ENOTEMPTY), so the
 * whole dir is renamed aside first — atomic — and a removal that a late
 * writer defeats is left for the next start instead of failing this one.
 */
export function clearExecScratch(root: string, execDir: string, logger: HostLogger): void {
  renameSync(execDir, `${execDir}.stale-${process.pid}-${Date.now()}`);
  mkdirSync(execDir, { recursive: true });
  const prefix = `${basename(execDir)}.stale-`;
  for (const name of readdirSync(root)) {
    if (!name.startsWith(prefix)) continue;
    try {
      rmSync(join(root, name), { recursive: true, force: true, maxRetries: 3 });
    } catch (err) {
      logger.warn(
        { dir: name, err: describeError(err) },
        "an old exec dir is still written to; removing it on the next start",
      );
    }
  }
}
