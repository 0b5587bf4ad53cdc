import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import {
  buildOciSpec,
  detectCgroups,
  type HostFacts,
  readHostHardLimits,
  resolveContainerSpec,
} from "../../agent/runtime/index.ts";
import { removeCgroup } from "../lib/cgroups.ts";
import { benchTempDir, removeTree } from "../lib/fs.ts";
import { mustExec } from "../lib/proc.ts";
import {
  type BenchContext,
  type Contender,
  fileAppears,
  READY_LINE,
  type StartSample,
  withTimeout,
} from "./contender.ts";

/**
 * Which config.json the bundle gets: `runc spec`'s default (the reference),
 * or — to profile where berth's time goes — the very spec berth's runtime
 * writes (seccomp, caps, masked paths, /dev /tmp /shm mounts, cgroup
 * limits), or that spec with one part dropped.
 */
export type RuncConfig = "runc-spec" | keyof typeof BERTH_VARIANTS;

/** Plain JSON view of a spec, so a variant can drop any part of it. */
type Json = Record<string, unknown> & {
  linux: Record<string, unknown> & { resources: { devices: unknown } };
};

const BERTH_VARIANTS = {
  "berth-config": { label: "", drop: (_: Json) => {} },
  "berth-config-no-seccomp": {
    label: " - seccomp",
    drop: (s: Json) => {
      delete s.linux.seccomp;
    },
  },
  "berth-config-no-limits": {
    label: " - cpu/memory/pids limits",
    drop: (s: Json) => {
      s.linux.resources = { devices: s.linux.resources.devices };
    },
  },
  "berth-config-no-tmp": {
    label: " - /tmp tmpfs",
    drop: (s: Json) => {
      s.mounts = (s.mounts as { destination: string }[]).filter((m) => m.destination !== "/tmp");
    },
  },
} as const;

/**
 * The floor: what any runc-based tool must do at least. Per container: a
 * bundle dir, `runc spec`'s default config.json (fresh pid/net/ipc/uts/mount
 * namespaces, no seccomp, no resource limits) with our args, an overlay of
 * the same rootfs, then `runc run` in the foreground with its stdout piped
 * straight to us.
 */
export class RawRunc implements Contender {
  readonly name: string;
  readonly method = {
    running:
      "mkdir bundle + write runc-spec config.json + mount overlay + spawn `runc run --pid-file` (foreground) until init.pid appears (inotify on the bundle dir; runc writes it after the exec of the user process was released)",
    print: "same run, until `ready` is read from runc's stdout pipe (runc passes the pipe to the container)",
    notes:
      "config = `runc spec` defaults: new pid/net/ipc/uts/mount namespaces, no seccomp, no cgroup limits",
  };
  private dir = "";
  private stateRoot = "";
  private template = "";
  private host?: HostFacts;
  private readonly cgroupParent: string;

  constructor(
    private readonly ctx: BenchContext,
    readonly config: RuncConfig = "runc-spec",
  ) {
    this.name =
      config === "runc-spec"
        ? "raw runc"
        : `profile: raw runc + berth's config.json${BERTH_VARIANTS[config].label}`;
    this.cgroupParent = `/berth-bench-runc-${config}-${ctx.runId}`;
    if (config !== "runc-spec") {
      this.method.notes = `config.json = buildOciSpec() of agent/runtime for the same spec as the berth row (cpu 1, 512 MiB)${BERTH_VARIANTS[config].label}; built and written inside the timed region`;
    }
  }

  async setup(): Promise<void> {
    this.dir = benchTempDir(this.ctx.cleanup, "berth-bench-runc-");
    this.stateRoot = join(this.dir, "state");
    const specDir = join(this.dir, "spec");
    mkdirSync(specDir);
    await mustExec("runc", ["spec", "--bundle", specDir]);
    const spec = JSON.parse(readFileSync(join(specDir, "config.json"), "utf8"));
    spec.process.terminal = false;
    spec.process.args = this.ctx.args;
    spec.root = { path: "rootfs", readonly: false };
    this.template = JSON.stringify(spec);
    rmSync(specDir, { recursive: true });
    if (this.config !== "runc-spec") {
      const cg = detectCgroups();
      this.host = {
        cgroupVersion: cg.version,
        hardLimits: readHostHardLimits(),
        swapAccounting: cg.swapAccounting,
        arch: process.arch,
        cgroupParent: this.cgroupParent,
      };
      this.ctx.cleanup.add(`remove cgroup ${this.cgroupParent}`, () => removeCgroup(this.cgroupParent));
    }
    this.ctx.cleanup.add("runc delete leftovers", () => this.deleteAll());
  }

  async measure(i: number): Promise<StartSample> {
    const id = `${this.ctx.runId}-runc-${i}`;
    const bundle = join(this.dir, id);
    const t0 = performance.now();
    for (const d of ["upper", "work", "rootfs"]) mkdirSync(join(bundle, d), { recursive: true });
    writeFileSync(join(bundle, "config.json"), this.configFor(id));
    try {
      await mustExec("mount", [
        "-t",
        "overlay",
        "overlay",
        "-o",
        `lowerdir=${this.ctx.rootfs},upperdir=${bundle}/upper,workdir=${bundle}/work`,
        join(bundle, "rootfs"),
      ]);
      const mounted = performance.now();
      const pid = fileAppears(bundle, "init.pid");
      let printAt: number | undefined;
      let child: ReturnType<typeof spawn> | undefined;
      const exited = new Promise<void>((resolve, reject) => {
        child = spawn(
          "runc",
          ["--root", this.stateRoot, "run", "--bundle", bundle, "--pid-file", join(bundle, "init.pid"), id],
          { stdio: ["ignore", "pipe", "pipe"] },
        );
        let out = "";
        let err = "";
        child.stdout!.setEncoding("utf8").on("data", (c: string) => {
          out += c;
          if (printAt === undefined && out.split("\n").includes(READY_LINE)) printAt = performance.now();
        });
        child.stderr!.setEncoding("utf8").on("data", (c: string) => {
          err += c;
        });
        child.on("error", reject);
        child.on("close", (code) =>
          code === 0 ? resolve() : reject(new Error(`runc run exited ${code}: ${err.trim().slice(-1000)}`)),
        );
      });
      exited.catch(() => {}); // awaited below; this only keeps an early failure from going unhandled
      try {
        const runningAt = await withTimeout(
          Promise.race([pid.at, exited.then(() => Promise.reject(new Error("runc exited before init.pid")))]),
          30_000,
          "runc's init.pid",
        );
        await withTimeout(exited, 30_000, "runc run to exit");
        if (printAt === undefined) throw new Error(`runc run ended without printing ${READY_LINE}`);
        return {
          runningMs: runningAt - t0,
          printMs: printAt - t0,
          phases: { bundleAndMount: mounted - t0 },
        };
      } finally {
        pid.close();
        if (child?.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      }
    } finally {
      // runc run (without --keep) deleted its container when the process ended.
      await removeTree(bundle);
    }
  }

  private configFor(id: string): string {
    if (this.config === "runc-spec" || !this.host) return this.template;
    const spec = buildOciSpec(
      resolveContainerSpec({
        id,
        image: { rootfs: this.ctx.rootfs },
        args: this.ctx.args,
        cpu: 1,
        memoryBytes: 512 * 1024 * 1024,
      }),
      this.host,
    );
    const json = structuredClone(spec) as unknown as Json;
    BERTH_VARIANTS[this.config].drop(json);
    return JSON.stringify(json);
  }

  private async deleteAll(): Promise<void> {
    const r = await mustExec("runc", ["--root", this.stateRoot, "list", "-q"]);
    for (const id of r.stdout.split("\n").filter(Boolean)) {
      await mustExec("runc", ["--root", this.stateRoot, "delete", "--force", id]);
    }
  }
}
