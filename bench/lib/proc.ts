import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";

// Child processes timed from the moment of spawn. All times are
// performance.now() milliseconds, so they compare with each other only
// within one process.

export interface ExecResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** spawn → exit */
  ms: number;
}

export interface ExecOptions {
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  cwd?: string;
  /** Called with each complete stdout line and the time it was read. */
  onLine?: (line: string, at: number) => void;
}

/** Runs a command to its end; never throws for a non-zero exit (see `mustExec`). */
export function exec(cmd: string, args: readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(cmd, args, {
      stdio: ["ignore", "pipe", "pipe"],
      env: opts.env ?? process.env,
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
    });
    let stdout = "";
    let stderr = "";
    let partial = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      const at = performance.now();
      stdout += chunk;
      if (!opts.onLine) return;
      partial += chunk;
      let nl = partial.indexOf("\n");
      while (nl >= 0) {
        opts.onLine(partial.slice(0, nl), at);
        partial = partial.slice(nl + 1);
        nl = partial.indexOf("\n");
      }
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${cmd} ${args.join(" ")} ran past ${opts.timeoutMs} ms; killed`));
    }, opts.timeoutMs ?? 60_000);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: performance.now() - t0 });
    });
  });
}

/** Like exec, but a non-zero exit throws with the command's stderr. */
export async function mustExec(
  cmd: string,
  args: readonly string[],
  opts: ExecOptions = {},
): Promise<ExecResult> {
  const r = await exec(cmd, args, opts);
  if (r.code !== 0) {
    const why = (r.stderr || r.stdout).trim().slice(-1500) || `signal ${r.signal}`;
    throw new Error(`${cmd} ${args.slice(0, 4).join(" ")} exited ${r.code ?? r.signal}: ${why}`);
  }
  return r;
}

/**
 * Runs a command that should print `line` on stdout; returns spawn → that
 * line (ms) once the command has also exited cleanly.
 */
export async function msUntilLine(
  cmd: string,
  args: readonly string[],
  line: string,
  opts: Omit<ExecOptions, "onLine"> = {},
): Promise<number> {
  const t0 = performance.now();
  let seenAt: number | undefined;
  const r = await mustExec(cmd, args, {
    ...opts,
    onLine: (l, at) => {
      if (seenAt === undefined && l.trim() === line) seenAt = at;
    },
  });
  if (seenAt === undefined)
    throw new Error(`${cmd} exited without printing ${JSON.stringify(line)}: ${r.stdout}`);
  return seenAt - t0;
}
