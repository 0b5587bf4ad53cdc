// The runc and criu commands snapshots need: state (where a container's
// bundle and root are), pause/resume around a commit, checkpoint, and
// `criu check` (asked once per agent: the answer is the kernel's).

import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { BerthError } from "../../shared/errors.ts";

const execFileP = promisify(execFile);

export interface RuncTarget {
  /** The runc binary. */
  runc: string;
  /** runc's state root (--root). */
  runcRoot: string;
}

function commandError(what: string, e: unknown): BerthError {
  const err = e as { stderr?: string; stdout?: string; message: string; code?: string | number };
  if (err.code === "ENOENT") return new BerthError("unavailable", `${what}: the command is not installed`);
  const text = (err.stderr || err.stdout || err.message).trim();
  return new BerthError("internal", `${what} failed: ${text.slice(-2000)}`);
}

async function runc(t: RuncTarget, args: string[], timeoutMs = 120_000): Promise<string> {
  try {
    const { stdout } = await execFileP(t.runc, ["--root", t.runcRoot, ...args], {
      maxBuffer: 16 * 1024 * 1024,
      timeout: timeoutMs,
    });
    return stdout;
  } catch (e) {
    throw commandError(`runc ${args[0]}`, e);
  }
}

export interface RuncState {
  status: string;
  bundle: string;
  /** The container's root file system on the host (the mounted overlay). */
  rootfs: string;
}

export async function runcState(t: RuncTarget, id: string): Promise<RuncState> {
  const parsed = JSON.parse(await runc(t, ["state", id])) as Partial<RuncState>;
  if (typeof parsed.bundle !== "string" || typeof parsed.rootfs !== "string") {
    throw new BerthError("internal", `runc state of ${id} names no bundle or rootfs`);
  }
  return { status: String(parsed.status), bundle: parsed.bundle, rootfs: parsed.rootfs };
}

/** Runs `fn` with the container's processes frozen (runc pause), resuming after, pass or fail. */
export async function whilePaused<T>(t: RuncTarget, id: string, fn: () => Promise<T>): Promise<T> {
  await runc(t, ["pause", id]);
  try {
    return await fn();
  } finally {
    await runc(t, ["resume", id]);
  }
}

/** `runc checkpoint --leave-running`: the container's memory and process state into imagePath. */
export async function runcCheckpoint(
  t: RuncTarget,
  id: string,
  dirs: { imagePath: string; workPath: string },
): Promise<void> {
  await runc(
    t,
    ["checkpoint", "--leave-running", "--image-path", dirs.imagePath, "--work-path", dirs.workPath, id],
    600_000,
  );
}

export interface CheckpointSupport {
  supported: boolean;
  reason?: string;
}

/** `criu check`, run once; later calls get the same answer. */
export class CriuCheck {
  private answer?: Promise<CheckpointSupport>;

  constructor(private readonly criu = "criu") {}

  check(): Promise<CheckpointSupport> {
    this.answer ??= this.run();
    return this.answer;
  }

  private async run(): Promise<CheckpointSupport> {
    try {
      await execFileP(this.criu, ["check"], { timeout: 60_000 });
      return { supported: true };
    } catch (e) {
      const err = e as { stderr?: string; stdout?: string; message: string; code?: string | number };
      if (err.code === "ENOENT") {
        return { supported: false, reason: `${this.criu} is not installed (Debian package criu)` };
      }
      const out = `${err.stderr ?? ""}${err.stdout ?? ""}`.trim() || err.message;
      return { supported: false, reason: `criu check failed: ${out.slice(-2000)}` };
    }
  }
}

/** The error for a host where `criu check` fails, carrying criu's own words. */
export function checkpointUnavailable(support: CheckpointSupport): BerthError {
  return new BerthError(
    "checkpoint_unavailable",
    `memory snapshots need CRIU, and this host cannot checkpoint: ${support.reason ?? "criu check failed"}`,
    { reason: support.reason ?? "" },
  );
}
