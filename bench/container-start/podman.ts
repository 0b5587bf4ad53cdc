import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { readHostHardLimits } from "../../agent/runtime/index.ts";
import { removeCgroup } from "../lib/cgroups.ts";
import type { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { type ExecResult, msUntilLine, mustExec } from "../lib/proc.ts";
import { type BenchContext, type Contender, READY_LINE, type StartSample } from "./contender.ts";

const IMAGE = "localhost/berth-bench:latest";

/**
 * podman 4 as root, with storage, run and tmp dirs of its own (nothing of
 * the host's podman state is used or touched). The image is pulled from the
 * same OCI layout (`oci:` transport) into its overlay store.
 */
export class Podman implements Contender {
  readonly name = "podman";
  readonly method = {
    running:
      "spawn `podman run -d --network none IMAGE python3 …` until it exits 0 (podman returns after `runc start`)",
    print: "spawn `podman run --rm --network none IMAGE python3 …` until `ready` is read from its stdout",
    notes:
      "runtime runc, cgroupfs manager, file events, overlay storage; default_ulimits clamped to the host's hard limits",
  };
  private own?: OwnPodman;
  /** Its own cgroup parent (conmon goes to <parent>/conmon), removed at the end. */
  private readonly cgroupParent: string;

  constructor(private readonly ctx: BenchContext) {
    this.cgroupParent = `/berth-bench-podman-${ctx.runId}`;
  }

  async setup(): Promise<void> {
    this.own = await ownPodman(this.ctx.cleanup, {
      cgroupParent: this.cgroupParent,
      source: `oci:${this.ctx.layout}:${this.ctx.imageTag}`,
      image: IMAGE,
    });
  }

  async measure(i: number): Promise<StartSample> {
    const name = `${this.ctx.runId}-podman-${i}`;
    const detached = await this.podman(
      ["run", "-d", ...this.runFlags(), "--name", name, IMAGE, ...this.ctx.args],
      30_000,
    );
    // python exits at once; `rm --force` would race that exit ("container state improper").
    await this.podman(["wait", name], 30_000);
    await this.podman(["rm", name]);
    const printMs = await this.started().untilLine(
      ["run", "--rm", ...this.runFlags(), IMAGE, ...this.ctx.args],
      READY_LINE,
      30_000,
    );
    return { runningMs: detached.ms, printMs };
  }

  private runFlags(): string[] {
    return ["--pull", "never", "--network", "none", "--cgroup-parent", this.cgroupParent];
  }

  private started(): OwnPodman {
    if (!this.own) throw new Error("podman: setup() has not run");
    return this.own;
  }

  private podman(args: string[], timeoutMs = 60_000) {
    return this.started().run(args, timeoutMs);
  }
}

export interface OwnPodman {
  /** `podman ARGS` with its own storage, to a zero exit. */
  run(args: string[], timeoutMs?: number): Promise<ExecResult>;
  /** spawn `podman ARGS` with its own storage → `line` read from its stdout (ms). */
  untilLine(args: string[], line: string, timeoutMs: number): Promise<number>;
}

/**
 * podman 4 as root with storage, run and tmp dirs of its own under a bench
 * temp dir (nothing of the host's podman state is used or touched), `source`
 * pulled into its overlay store and tagged `image`. Its containers, storage
 * and cgroups (under `cgroupParent`, conmon's under <parent>/conmon) are
 * removed at cleanup.
 */
export async function ownPodman(
  cleanup: Cleanup,
  o: { cgroupParent: string; source: string; image: string },
): Promise<OwnPodman> {
  const dir = benchTempDir(cleanup, "berth-bench-podman-");
  const conf = join(dir, "containers.conf");
  writeFileSync(conf, containersConf(dir));
  const env = { ...process.env, CONTAINERS_CONF: conf };
  const base = [
    "--root",
    join(dir, "root"),
    "--runroot",
    join(dir, "runroot"),
    "--storage-driver",
    "overlay",
  ];
  const own: OwnPodman = {
    run: (args, timeoutMs = 60_000) => mustExec("podman", [...base, ...args], { env, timeoutMs }),
    untilLine: (args, line, timeoutMs) => msUntilLine("podman", [...base, ...args], line, { env, timeoutMs }),
  };
  cleanup.add("podman: remove containers and storage", async () => {
    await own.run(["rm", "--all", "--force", "--time", "0"]);
    await own.run(["system", "reset", "--force"]);
    removeCgroup(`${o.cgroupParent}/conmon`);
    removeCgroup(o.cgroupParent);
  });
  const pulled = await own.run(["pull", "--quiet", o.source], 300_000);
  await own.run(["tag", pulled.stdout.trim(), o.image]);
  return own;
}

/**
 * podman asks runc for RLIMIT_NOFILE/NPROC of 1048576/4194304 by default;
 * without CAP_SYS_RESOURCE (this VM) runc cannot raise a hard limit, so the
 * defaults are set at or below ours. podman also lowers its own RLIMIT_NPROC
 * to 32768 when it cannot raise it (seen in conmon's /proc/PID/limits), so
 * nproc is capped there too.
 */
export function containersConf(dir: string): string {
  const hard = readHostHardLimits();
  const cap = (row: string, want: number) => {
    const h = hard.get(row);
    return h === null || h === undefined ? want : Math.min(h, want);
  };
  const nofile = cap("Max open files", 1_048_576);
  const nproc = cap("Max processes", 32_768);
  return [
    "[containers]",
    `default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]`,
    "[engine]",
    'cgroup_manager = "cgroupfs"',
    'events_logger = "file"',
    'runtime = "runc"',
    `tmp_dir = "${join(dir, "tmp")}"`,
    `volume_path = "${join(dir, "volumes")}"`,
    "",
  ].join("\n");
}
