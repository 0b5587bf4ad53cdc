import { accessSync, constants, statSync } from "node:fs";
import { delimiter, isAbsolute, join } from "node:path";

/** What one finished (or failed to start) command produced. */
export interface CommandResult {
  /** Exit status; undefined when the command never started or was killed. */
  exitCode: number | undefined;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** Set when the command could not be started at all (e.g. ENOENT, EACCES). */
  spawnError?: string;
}

export interface RunOptions {
  timeoutMs: number;
  env: NodeJS.ProcessEnv;
}

/**
 * Runs an external program without a shell. Injected into the probe and the
 * injector so tests can substitute their own; the default is execa.
 */
export type CommandRunner = (
  file: string,
  args: readonly string[],
  opts: RunOptions,
) => Promise<CommandResult>;

export const execaRunner: CommandRunner = async (file, args, opts) => {
  // Loaded on the first command (a host with GPUs), not at start: docs/agent-host.md, "Memory".
  const { execa } = await import("execa");
  const r = await execa(file, [...args], {
    reject: false,
    timeout: opts.timeoutMs,
    env: opts.env,
    extendEnv: false,
    stripFinalNewline: false,
    // A wedged driver can leave nvidia-smi unkillable by SIGTERM; do not wait forever.
    forceKillAfterDelay: 2_000,
  });
  const spawnFailed = r.failed && r.exitCode === undefined && !r.timedOut && !r.isTerminated;
  const out: CommandResult = {
    exitCode: r.exitCode,
    stdout: typeof r.stdout === "string" ? r.stdout : "",
    stderr: typeof r.stderr === "string" ? r.stderr : "",
    timedOut: r.timedOut,
  };
  if (spawnFailed) out.spawnError = r.originalMessage || r.shortMessage;
  return out;
};

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves a command the way a shell would: a name with a slash is taken as a
 * path, anything else is looked up on `pathVar`. Returns the absolute path, or
 * undefined when there is no executable by that name.
 */
export function findExecutable(command: string, pathVar: string | undefined): string | undefined {
  if (command.includes("/")) {
    const abs = isAbsolute(command) ? command : join(process.cwd(), command);
    return isExecutableFile(abs) ? abs : undefined;
  }
  for (const dir of (pathVar ?? "").split(delimiter)) {
    if (!dir) continue;
    const candidate = join(isAbsolute(dir) ? dir : join(process.cwd(), dir), command);
    if (isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

/** First non-empty lines of a command's output, for error reasons. */
export function outputSummary(r: CommandResult, maxLines = 3): string {
  const text = `${r.stderr}\n${r.stdout}`;
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  return lines.slice(0, maxLines).join(" ");
}
