import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, openSync, closeSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sleep } from "../../shared/net.ts";
import { removeCgroup } from "../lib/cgroups.ts";
import { benchTempDir } from "../lib/fs.ts";
import { exec, msUntilLine, mustExec } from "../lib/proc.ts";
import { type BenchContext, type Contender, READY_LINE, type StartSample } from "./contender.ts";

const IMAGE = "localhost/berth-bench:latest";

/**
 * containerd 1.6 through `ctr`, with a containerd daemon of our own (own
 * root, state, socket; CRI plugin off) started here and stopped by pid. The
 * image is the same OCI layout, turned into an oci-archive with skopeo and
 * imported with `ctr image import`.
 */
export class Ctr implements Contender {
  readonly name = "containerd (ctr)";
  readonly method = {
    running:
      "spawn `ctr run -d IMAGE ID python3 …` until it exits 0 (ctr returns after the task was started via the shim)",
    print: "spawn `ctr run --rm IMAGE ID python3 …` until `ready` is read from its stdout",
    notes:
      "containerd's default spec: fresh network namespace with only lo (ctr has no --network none; that is its default)",
  };
  private socket = "";
  private daemon?: ChildProcess;
  /** containerd puts each container's cgroup under /<namespace>/ and leaves that parent. */
  private readonly namespace: string;

  constructor(private readonly ctx: BenchContext) {
    this.namespace = `berth-bench-ctr-${ctx.runId}`;
  }

  async setup(): Promise<void> {
    const dir = benchTempDir(this.ctx.cleanup, "berth-bench-ctr-");
    this.socket = join(dir, "containerd.sock");
    const config = join(dir, "config.toml");
    writeFileSync(config, containerdConfig(dir, this.socket));
    const logPath = join(dir, "containerd.log");
    const log = openSync(logPath, "a");
    const daemon = spawn("containerd", ["--config", config], { stdio: ["ignore", log, log] });
    closeSync(log);
    this.daemon = daemon;
    const exited = new Promise<void>((r) => daemon.once("exit", () => r()));
    daemon.on("error", () => {});
    // Added after the temp dir: runs before it, so the daemon is gone when its dirs are removed.
    this.ctx.cleanup.add(`stop containerd (pid ${daemon.pid})`, async () => {
      await this.removeAll().catch((e: Error) => console.error(`ctr cleanup: ${e.message}`));
      if (daemon.exitCode === null && daemon.signalCode === null) {
        daemon.kill("SIGTERM");
        const stopped = await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]);
        if (!stopped) daemon.kill("SIGKILL");
      }
      removeCgroup(`/${this.namespace}`);
    });
    const deadline = Date.now() + 20_000;
    while (!(existsSync(this.socket) && (await exec("ctr", this.args(["version"]))).code === 0)) {
      if (daemon.exitCode !== null || Date.now() > deadline) {
        const tail = existsSync(logPath) ? readFileSync(logPath, "utf8").slice(-1500) : "";
        throw new Error(`containerd did not come up: ${tail}`);
      }
      await sleep(100);
    }
    const archive = join(dir, "image.tar");
    await mustExec(
      "skopeo",
      [
        "copy",
        "--quiet",
        `oci:${this.ctx.layout}:${this.ctx.imageTag}`,
        `oci-archive:${archive}:${this.ctx.imageTag}`,
      ],
      { timeoutMs: 300_000 },
    );
    await mustExec("ctr", this.args(["image", "import", "--index-name", IMAGE, archive]), {
      timeoutMs: 300_000,
    });
  }

  async measure(i: number): Promise<StartSample> {
    const id = `${this.ctx.runId}-ctr-${i}`;
    const detached = await mustExec("ctr", this.args(["run", "-d", IMAGE, `${id}-a`, ...this.ctx.args]), {
      timeoutMs: 30_000,
    });
    await this.remove(`${id}-a`);
    const printMs = await msUntilLine(
      "ctr",
      this.args(["run", "--rm", IMAGE, `${id}-b`, ...this.ctx.args]),
      READY_LINE,
      {
        timeoutMs: 30_000,
      },
    );
    return { runningMs: detached.ms, printMs };
  }

  private args(rest: string[]): string[] {
    return ["--address", this.socket, "--namespace", this.namespace, ...rest];
  }

  private async remove(id: string): Promise<void> {
    await exec("ctr", this.args(["task", "rm", "--force", id]), { timeoutMs: 30_000 });
    await mustExec("ctr", this.args(["container", "rm", id]), { timeoutMs: 30_000 });
  }

  private async removeAll(): Promise<void> {
    if (!this.daemon || this.daemon.exitCode !== null) return;
    const r = await mustExec("ctr", this.args(["container", "ls", "--quiet"]), { timeoutMs: 30_000 });
    for (const id of r.stdout.split("\n").filter(Boolean)) await this.remove(id);
  }
}

function containerdConfig(dir: string, socket: string): string {
  return [
    "version = 2",
    `root = "${join(dir, "root")}"`,
    `state = "${join(dir, "state")}"`,
    // Only what `ctr run` needs: no CRI, no snapshotters that probe the host.
    'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
    "[grpc]",
    `  address = "${socket}"`,
    "[ttrpc]",
    `  address = "${socket}.ttrpc"`,
    "[debug]",
    '  address = ""',
    "[metrics]",
    '  address = ""',
    "",
  ].join("\n");
}
