import { type OwnPodman, ownPodman } from "../container-start/podman.ts";
import type { Cleanup } from "../lib/cleanup.ts";
import type { ExecResult } from "../lib/proc.ts";

const IMAGE = "localhost/berth-bench-sandbox:latest";

/**
 * The reference of bench/sandbox: podman 4 as root with storage, run and tmp
 * dirs of its own (as in bench/container-start), the same OCI layout pulled
 * through the `oci:` transport, so its containers run berth's default rootfs.
 */
export class PodmanReference {
  private own?: OwnPodman;
  private readonly cgroupParent: string;

  constructor(
    private readonly cleanup: Cleanup,
    runId: string,
  ) {
    this.cgroupParent = `/berth-bench-podman-${runId}`;
  }

  async setup(layout: string, tag: string): Promise<void> {
    this.own = await ownPodman(this.cleanup, {
      cgroupParent: this.cgroupParent,
      source: `oci:${layout}:${tag}`,
      image: IMAGE,
    });
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
    return this.started().untilLine(["run", "--rm", ...this.runFlags(), IMAGE, ...args], line, 60_000);
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

  private started(): OwnPodman {
    if (!this.own) throw new Error("podman: setup() has not run");
    return this.own;
  }

  private podman(args: string[], timeoutMs = 60_000): Promise<ExecResult> {
    return this.started().run(args, timeoutMs);
  }
}
