// Every host command of the network subsystem goes through here: argv arrays,
// never shell strings, and failures become BerthErrors that quote the command
// and its stderr.

import { execa } from "execa";
import { BerthError } from "../../shared/errors.ts";

export interface CommandResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** Runs a command and returns its result whatever the exit code (for probing). */
export async function tryRun(cmd: string, args: readonly string[], input?: string): Promise<CommandResult> {
  const r = await execa(cmd, args, {
    input,
    reject: false,
    timeout: 30_000,
    stripFinalNewline: true,
    env: { LC_ALL: "C" },
  });
  if (r.failed && r.exitCode === undefined) {
    throw new BerthError("unavailable", `cannot run ${cmd}: ${r.shortMessage}`);
  }
  return { stdout: String(r.stdout ?? ""), stderr: String(r.stderr ?? ""), exitCode: r.exitCode ?? 1 };
}

/** Runs a command; a non-zero exit throws with the command line and stderr. */
export async function run(cmd: string, args: readonly string[], input?: string): Promise<string> {
  const r = await tryRun(cmd, args, input);
  if (r.exitCode !== 0) {
    const detail = (r.stderr || r.stdout).trim().split("\n").slice(0, 6).join(" | ");
    throw new BerthError("internal", `${cmd} ${args.join(" ")} failed (exit ${r.exitCode}): ${detail}`, {
      command: [cmd, ...args],
      exitCode: r.exitCode,
    });
  }
  return r.stdout;
}

/** True when a failed command said the object is already gone. */
export function isMissingError(stderr: string): boolean {
  return /no such file or directory|cannot find device|does not exist|not found/i.test(stderr);
}
