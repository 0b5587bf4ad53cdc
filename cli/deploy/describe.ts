// `python3 -m berth.client.describe` (docs/deployments-sdk.md): what a FILE.py:OBJECT
// registers, and its code archive. The CLI runs the SDK of this checkout
// (sdk/python, as the agent mounts it into containers), so the stub it
// describes matches what the runner imports.

import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { BerthError } from "../../shared/errors.ts";

export const DEFAULT_SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));

/** What describe prints on success. */
export interface Described {
  ok: true;
  type: string;
  name: string;
  config: Record<string, unknown>;
  extra: Record<string, unknown> & { code_sha256: string; when?: string };
  root: string;
  handler: string;
  /** With an archive: how many files it holds. */
  archive_files?: number;
}

/** Describe refused the target (exit code 2): the user's file, not the CLI, is at fault. */
export class DescribeFailed extends Error {
  constructor(
    message: string,
    readonly traceback?: string,
  ) {
    super(message);
    this.name = "DescribeFailed";
  }
}

export interface DescribeOptions {
  name?: string;
  /** Also write the code archive here (and fill extra.code_sha256). */
  archive?: string;
  env?: NodeJS.ProcessEnv;
  /** Where the module's own prints go while it is imported. */
  stderr?: NodeJS.WritableStream;
}

/** `python3` unless BERTH_PYTHON names another; the SDK from BERTH_SDK_DIR or this checkout. */
export function pythonCommand(env: NodeJS.ProcessEnv): { python: string; env: NodeJS.ProcessEnv } {
  const sdk = env.BERTH_SDK_DIR || DEFAULT_SDK_DIR;
  return {
    python: env.BERTH_PYTHON || "python3",
    env: { ...env, PYTHONPATH: env.PYTHONPATH ? `${sdk}:${env.PYTHONPATH}` : sdk },
  };
}

// `python3 -m` would put the working directory first on sys.path, so a user's
// queue.py or json.py there would replace the module berth itself imports.
// Dropping that entry first lets describe refuse such a name clearly instead.
const RUN_DESCRIBE =
  'import runpy, sys; sys.path.pop(0); runpy.run_module("berth.client.describe", run_name="__main__", alter_sys=True)';

export async function describeTarget(target: string, o: DescribeOptions = {}): Promise<Described> {
  const { python, env } = pythonCommand(o.env ?? process.env);
  const args = ["-c", RUN_DESCRIBE, target];
  if (o.name !== undefined) args.push("--name", o.name);
  if (o.archive !== undefined) args.push("--archive", o.archive);
  const child = spawn(python, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  const stderr = o.stderr ?? process.stderr;
  child.stderr.on("data", (d: Buffer) => stderr.write(d));
  const exit = await new Promise<number | null>((resolve, reject) => {
    child.once("error", (e: NodeJS.ErrnoException) =>
      reject(
        new BerthError(
          "unavailable",
          e.code === "ENOENT"
            ? `${python} is not installed or not on PATH (set BERTH_PYTHON to the Python 3 to use)`
            : `cannot run ${python}: ${e.message}`,
        ),
      ),
    );
    child.once("close", (code) => resolve(code));
  });
  const line = stdout.trim().split("\n").pop() ?? "";
  let answer: { ok?: boolean; error?: string; traceback?: string } | undefined;
  try {
    answer = JSON.parse(line) as typeof answer;
  } catch {
    answer = undefined;
  }
  if (!answer || typeof answer.ok !== "boolean") {
    throw new BerthError(
      "internal",
      `berth.client.describe (${python}) exited with ${exit} without its JSON answer${line ? `: ${line.slice(0, 500)}` : ""}`,
    );
  }
  if (!answer.ok) throw new DescribeFailed(answer.error ?? "describe failed", answer.traceback);
  return answer as Described;
}
