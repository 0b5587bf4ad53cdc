// Every host command of the network subsystem goes through here: argv arrays,
// never shell strings, and failures become BerthErrors that quote the command
// and its stderr.

import { spawn } from "node:child_process";
import { BerthError } from "../../shared/errors.ts";

export interface CommandResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

const TIMEOUT_MS = 30_000;

/**
 * Runs a command and returns its result whatever the exit code (for probing).
 * Plain child_process rather than execa: attach runs these on every
 * container start, and execa's extra work costs ~2 ms per command.
 */
export function tryRun(cmd: string, args: readonly string[], input?: string): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      env: { ...process.env, LC_ALL: "C" },
      stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, TIMEOUT_MS);
    child.stdout?.on("data", (b: Buffer) => out.push(b));
    child.stderr?.on("data", (b: Buffer) => err.push(b));
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new BerthError("unavailable", `cannot run ${cmd}: ${e.message}`));
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const stderr = Buffer.concat(err).toString().replace(/\n$/, "");
      if (timedOut) {
        reject(
          new BerthError("unavailable", `cannot run ${cmd}: timed out after ${TIMEOUT_MS} ms ${stderr}`),
        );
        return;
      }
      resolve({
        stdout: Buffer.concat(out).toString().replace(/\n$/, ""),
        stderr,
        exitCode: code ?? (signal ? 128 : 1),
      });
    });
    if (input !== undefined) {
      // A command that exits without reading all of its input must not crash the agent with EPIPE.
      child.stdin?.on("error", () => {});
      child.stdin?.end(input);
    }
  });
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
