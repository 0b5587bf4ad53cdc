import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { containersConf } from "../container-start/podman.ts";
import type { Cleanup } from "../lib/cleanup.ts";
import { removeCgroup } from "../lib/cgroups.ts";
import { benchTempDir } from "../lib/fs.ts";
import { type ExecResult, msUntilLine, mustExec } from "../lib/proc.ts";

const IMAGE = "localhost/berth-bench-sandbox:latest";

/**
 * The reference of bench/sandbox: podman 4 as root with storage, run and tmp
 * dirs of its own (as in bench/container-start), the same OCI layout pulled
 * through the `oci:` transport, so its containers run berth's default rootfs.
 */
export class PodmanReference {
  private base: string[] = [];
  private env: NodeJS.ProcessEnv = {};
  private readonly cgroupParent: string;

  constructor(
    private readonly cleanup: Cleanup,
    runId: string,
  ) {
    this.cgroupParent = `/berth-bench-podman-${runId}`;
  }

  async setup(layout: string, tag: string): Promise<void> {
    const dir = benchTempDir(this.cleanup, "berth-bench-podman-");
    const conf = join(dir, "containers.conf");
    writeFileSync(conf, containersConf(dir));
    this.env = { ...process.env, CONTAINERS_CONF: conf };
    this.base = [
      "--root",
      join(dir, "root"),
      "--runroot",
      join(dir, "runroot"),
      "--storage-driver",
      "overlay",
    ];
    this.cleanup.add("podman: remove containers and storage", async () => {
      await this.podman(["rm", "--all", "--force", "--time", "0"]);
      await this.podman(["system", "reset", "--force"]);
      removeCgroup(`${this.cgroupParent}/conmon`);
      removeCgroup(this.cgroupParent);
    });
    const pulled = await this.podman(["pull", "--quiet", `oci:${layout}:${tag}`], 300_000);
    await this.podman(["tag", pulled.stdout.trim(), IMAGE]);
  }

  /** Flags of every container: no image pull, an empty netns, our cgroup parent, berth's sandbox cpu/memory. */
  private runFlags(): string[] {
    return [
      ...["--pull", "never", "--network", "none", "--cgroup-parent", this.cgroupParent],
      ...["--cpus", "1", "--memory", "512m"],
    ];
  }

  /** spawn `podman run --rm IMAGE ARGS` → `line` read from its stdout (ms). */
  runUntilLine(args: string[], line: string): Promise<number> {
    return msUntilLine("podman", [...this.base, "run", "--rm", ...this.runFlags(), IMAGE, ...args], line, {
      env: this.env,
      timeoutMs: 60_000,
    });
  }

  /** A container that keeps running (`sleep infinity`) for exec and cp samples. */
  async startIdle(name: string): Promise<void> {
    await this.podman(["run", "-d", ...this.runFlags(), "--name", name, IMAGE, "sleep", "infinity"], 60_000);
  }

  /** `podman exec NAME ARGS` to its exit; its stdout and wall time. */
  exec(name: string, args: string[]): Promise<ExecResult> {
    return this.podman(["exec", name, ...args], 60_000);
  }

  /** `podman cp FILE NAME:DEST` to its exit (ms). */
  async copyIn(file: string, name: string, dest: string): Promise<number> {
    return (await this.podman(["cp", file, `${name}:${dest}`], 300_000)).ms;
  }

  private podman(args: string[], timeoutMs = 60_000): Promise<ExecResult> {
    return mustExec("podman", [...this.base, ...args], { env: this.env, timeoutMs });
  }
}
