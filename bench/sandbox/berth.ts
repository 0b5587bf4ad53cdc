import { type ChildProcess, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createInterface, type Interface } from "node:readline";
import { fileURLToPath } from "node:url";
import { type BerthUp, startBerthUp } from "../../test/helpers/berth-up.ts";
import { Teardown } from "../../test/network/helpers.ts";
import type { Cleanup } from "../lib/cleanup.ts";
import { withTimeout } from "../container-start/contender.ts";

const DRIVER = fileURLToPath(new URL("./driver.py", import.meta.url));

/** One HTTP request the SDK sent, as driver.py timed it (ms from the SDK call's start). */
export interface HttpTiming {
  req: string;
  at_ms: number;
  ms: number;
}

export interface CreateSample {
  /** Sandbox(...).create() → the line `ready` read (what the benchmark reports). */
  ms: number;
  /** POST /terminate afterwards (not part of `ms`). */
  terminate_ms: number;
  /** It answered sandbox_terminated because the exit event of its own stop came first (README: the race). */
  terminate_raced: boolean;
  sandbox_id: string;
  /** ms from the create call at which each step was done, from the client's, coordinator's and agent's clocks. */
  marks: Record<string, number | null>;
  http: HttpTiming[];
}

export interface ExecSample {
  ms: number;
  /** The coordinator's started_at → ended_at of the process (runc exec + the command, no HTTP). */
  session_ms: number | null;
  http: HttpTiming[];
}

/**
 * A `berth up` cluster (test/helpers/berth-up.ts, stopped through `cleanup`)
 * and driver.py running against it, one command at a time.
 */
export class BerthSide {
  private constructor(
    readonly cluster: BerthUp,
    private readonly child: ChildProcess,
    private readonly lines: Interface,
  ) {}

  /** `logFile`: where the cluster's output is written at the end, also on failure; `upArgs`: more `berth up` flags. */
  static async start(cleanup: Cleanup, logFile?: string, upArgs: string[] = []): Promise<BerthSide> {
    // The helper's Teardown runs its steps (leftover containers stopped through
    // the agent, the cluster, its network, its home) as one cleanup action.
    const teardown = new Teardown({
      after: (fn) =>
        cleanup.add("stop the berth up cluster", async () => {
          await fn();
        }),
    });
    const cluster = await startBerthUp(teardown, upArgs);
    if (logFile)
      cleanup.add(`write the cluster's output to ${logFile}`, () => writeFileSync(logFile, cluster.output()));
    const child = spawn("python3", [DRIVER], {
      cwd: cluster.appDir,
      env: cluster.env,
      stdio: ["pipe", "pipe", "inherit"],
    });
    const exited = new Promise((r) => child.once("exit", r));
    const side = new BerthSide(
      cluster,
      child,
      createInterface({ input: child.stdout as NodeJS.ReadableStream }),
    );
    cleanup.add("driver.py: terminate its sandboxes and stop", async () => {
      if (child.exitCode === null) {
        child.stdin?.end(`${JSON.stringify({ op: "close" })}\n`);
        const stopped = await Promise.race([exited.then(() => true), sleep(60_000).then(() => false)]);
        if (!stopped) child.kill("SIGKILL");
      }
    });
    return side;
  }

  /** One command to driver.py and its answer; throws with the driver's error. */
  async call<T>(cmd: Record<string, unknown>, timeoutMs = 120_000): Promise<T> {
    const answer = withTimeout(
      new Promise<string>((resolve, reject) => {
        const onLine = (l: string) => {
          this.lines.off("close", onClose);
          resolve(l);
        };
        const onClose = () => {
          this.lines.off("line", onLine);
          reject(new Error("driver.py exited"));
        };
        this.lines.once("line", onLine);
        this.lines.once("close", onClose);
      }),
      timeoutMs,
      `driver.py ${cmd.op}`,
    );
    this.child.stdin?.write(`${JSON.stringify(cmd)}\n`);
    const r = JSON.parse(await answer) as { ok: boolean; error?: string; trace?: string } & T;
    if (!r.ok) throw new Error(`driver.py ${cmd.op}: ${r.error}\n${r.trace ?? ""}`);
    return r;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
