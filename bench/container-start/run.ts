// Container start latency: berth's agent runtime vs raw runc vs podman vs
// containerd (ctr), same rootfs, same machine, interleaved in one run.
// Usage: node --import tsx bench/container-start/run.ts [--iterations N] [--warmup W] [--only a,b] [--profile]
// See bench/README.md for what each figure means per tool.
import { parseArgs } from "node:util";
import { describeError } from "../../shared/errors.ts";
import { TEST_IMAGE_TAG, testImageLayout } from "../../test/helpers/test-image.ts";
import { testRootfs } from "../../test/helpers/rootfs.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { machineInfo, toolVersion } from "../lib/machine.ts";
import { fmtMs, fmtRatio, formatTable, type Summary, summarize, writeResults } from "../lib/stats.ts";
import { BerthHost } from "./berth-host.ts";
import { BerthRuntime } from "./berth-runtime.ts";
import { type BenchContext, CONTAINER_ARGS, type Contender, type StartSample } from "./contender.ts";
import { Ctr } from "./ctr.ts";
import { Podman } from "./podman.ts";
import { RawRunc } from "./raw-runc.ts";

/** A contender that fails this many iterations in a row is given up on. */
const MAX_CONSECUTIVE_FAILURES = 5;
const TARGET_RATIO_TO_RUNC = 1.3;

interface Row {
  contender: Contender;
  /** Set when the contender cannot run here (setup failed, or it kept failing). */
  unavailable?: string;
  samples: StartSample[];
  errors: string[];
  consecutiveFailures: number;
}

function options() {
  const { values } = parseArgs({
    options: {
      iterations: { type: "string", default: "30" },
      warmup: { type: "string", default: "3" },
      only: { type: "string" },
      profile: { type: "boolean", default: false },
    },
  });
  const iterations = Number(values.iterations);
  const warmup = Number(values.warmup);
  if (!Number.isInteger(iterations) || iterations < 1)
    throw new Error("--iterations must be a positive integer");
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error("--warmup must be a non-negative integer");
  return {
    iterations,
    warmup,
    profile: values.profile ?? false,
    only: values.only?.split(",").map((s) => s.trim()),
  };
}

async function main(): Promise<void> {
  const opts = options();
  if (process.getuid?.() !== 0) throw new Error("this benchmark runs containers with runc: run it as root");
  const cleanup = new Cleanup();
  const offSignals = cleanup.onSignals();
  try {
    console.log("preparing the rootfs and OCI image (cached after the first time)...");
    const ctx: BenchContext = {
      rootfs: await testRootfs(),
      layout: await testImageLayout(),
      imageTag: TEST_IMAGE_TAG,
      args: CONTAINER_ARGS,
      cleanup,
      runId: `b${process.pid}`,
    };
    const all: Contender[] = [
      new RawRunc(ctx),
      new BerthRuntime(ctx),
      // What the per-container disk quota costs (docs/runtime.md, "Disk quota").
      new BerthRuntime(ctx, 0),
      // The other OCI runtimes (docs/runtime.md, "OCI runtimes").
      new BerthRuntime(ctx, undefined, "crun"),
      new BerthRuntime(ctx, undefined, "runsc"),
      new BerthHost(ctx, "import"),
      new BerthHost(ctx, "import", false),
      new BerthHost(ctx, "registry"),
      new Podman(ctx),
      new Ctr(ctx),
      // Ablation rows: where berth's time over raw runc goes (see README).
      ...(opts.profile
        ? (
            [
              "berth-config",
              "berth-config-no-seccomp",
              "berth-config-no-limits",
              "berth-config-no-tmp",
            ] as const
          ).map((v) => new RawRunc(ctx, v))
        : []),
    ];
    const rows: Row[] = all
      .filter((c) => !opts.only || opts.only.some((o) => c.name.toLowerCase().includes(o.toLowerCase())))
      .map((contender) => ({ contender, samples: [], errors: [], consecutiveFailures: 0 }));
    for (const row of rows) {
      if (cleanup.interrupted) break;
      console.log(`setting up ${row.contender.name}...`);
      try {
        await row.contender.setup();
      } catch (e) {
        row.unavailable = describeError(e);
        console.log(`  unavailable: ${row.unavailable}`);
      }
    }
    const total = opts.warmup + opts.iterations;
    for (let i = 0; i < total; i++) {
      const live = rows.filter((r) => !r.unavailable);
      if (live.length === 0 || cleanup.interrupted) break;
      const warm = i < opts.warmup;
      // Round-robin with a rotating start: each contender runs first, second, ...
      // equally often, so machine noise and cache effects spread over all of them.
      for (let k = 0; k < live.length && !cleanup.interrupted; k++) {
        const row = live[(i + k) % live.length]!;
        await measureOnce(row, i, warm);
      }
      process.stdout.write(`\r${warm ? "warm-up" : "iteration"} ${i + 1}/${total}   `);
    }
    process.stdout.write("\n");
    if (cleanup.interrupted) {
      process.exitCode = cleanup.interrupted === "SIGINT" ? 130 : 143;
      console.log("interrupted: no results written");
      return;
    }
    await report(rows, opts);
  } finally {
    await cleanup.run();
    offSignals();
  }
}

async function measureOnce(row: Row, i: number, warm: boolean): Promise<void> {
  try {
    const s = await row.contender.measure(i);
    row.consecutiveFailures = 0;
    if (!warm) row.samples.push(s);
  } catch (e) {
    const msg = `iteration ${i}: ${describeError(e)}`;
    row.errors.push(msg);
    row.consecutiveFailures++;
    if (row.consecutiveFailures >= MAX_CONSECUTIVE_FAILURES) {
      row.unavailable = `failed ${MAX_CONSECUTIVE_FAILURES} times in a row; last: ${describeError(e)}`;
    }
  }
}

async function report(
  rows: Row[],
  opts: { iterations: number; warmup: number; profile: boolean; only?: string[] },
): Promise<void> {
  const sum = (r: Row | undefined, f: "runningMs" | "printMs"): Summary | undefined =>
    r && !r.unavailable && r.samples.length > 0 ? summarize(r.samples.map((s) => s[f])) : undefined;
  const runc = rows.find((r) => r.contender instanceof RawRunc && r.contender.config === "runc-spec");
  const ref = { running: sum(runc, "runningMs"), print: sum(runc, "printMs") };
  const table = rows.map((r) => {
    if (r.unavailable && r.samples.length === 0) {
      return [
        r.contender.name,
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
        "0",
        String(r.errors.length),
        `unavailable: ${r.unavailable}`,
      ];
    }
    const a = sum(r, "runningMs");
    const b = sum(r, "printMs");
    return [
      r.contender.name,
      fmtMs(a?.p50),
      fmtMs(a?.p95),
      fmtRatio(a?.p50, ref.running?.p50),
      fmtMs(b?.p50),
      fmtMs(b?.p95),
      fmtRatio(b?.p50, ref.print?.p50),
      String(r.samples.length),
      String(r.errors.length),
      r.unavailable ? `unavailable: ${r.unavailable}` : "",
    ];
  });
  const header = [
    "contender",
    "(a) p50",
    "(a) p95",
    "(a) p50 vs runc",
    "(b) p50",
    "(b) p95",
    "(b) p50 vs runc",
    "n",
    "errors",
    "notes",
  ];
  console.log(
    "\n(a) request -> container process running, (b) request -> python3's `ready` read on the host; ms\n",
  );
  console.log(formatTable(header, table));

  const target = targetVerdict(rows, sum);
  console.log(`\ntarget (berth p50 <= ${TARGET_RATIO_TO_RUNC}x raw runc and below podman and ctr):`);
  for (const line of target.lines) console.log(`  ${line}`);
  for (const r of rows.filter((r) => r.errors.length > 0)) {
    console.log(`\n${r.contender.name} errors (${r.errors.length}):`);
    for (const e of r.errors.slice(0, 5)) console.log(`  ${e}`);
  }

  const [runcV, podmanV, ctrV, containerdV] = await Promise.all([
    toolVersion("runc", ["--version"]),
    toolVersion("podman", ["--version"]),
    toolVersion("ctr", ["--version"]),
    toolVersion("containerd", ["--version"]),
  ]);
  // A partial run (--only) must not replace the day's full result.
  const path = writeResults(opts.only ? "container-start-partial" : "container-start", {
    benchmark: "container-start",
    date: new Date().toISOString(),
    machine: machineInfo(),
    versions: { node: process.version, runc: runcV, podman: podmanV, ctr: ctrV, containerd: containerdV },
    options: { ...opts, containerArgs: CONTAINER_ARGS },
    figures: {
      runningMs: "(a) request -> container process running (per-tool marker, see method)",
      printMs: "(b) request -> python3's `ready` line read on the host",
    },
    target: { ratioToRunc: TARGET_RATIO_TO_RUNC, ...target.json },
    contenders: rows.map((r) => ({
      name: r.contender.name,
      method: r.contender.method,
      status: r.unavailable ? `unavailable: ${r.unavailable}` : "ok",
      summary: { runningMs: sum(r, "runningMs"), printMs: sum(r, "printMs") },
      errors: r.errors,
      samples: samplesJson(r.samples),
    })),
  });
  console.log(`\nwrote ${path}`);
}

/** Column-wise, rounded to 0.01 ms: one array per figure and per phase, in iteration order. */
function samplesJson(samples: StartSample[]) {
  const round = (n: number) => Math.round(n * 100) / 100;
  const phases: Record<string, number[]> = {};
  for (const s of samples) {
    for (const [k, v] of Object.entries(s.phases ?? {})) {
      phases[k] = [...(phases[k] ?? []), round(v)];
    }
  }
  return {
    runningMs: samples.map((s) => round(s.runningMs)),
    printMs: samples.map((s) => round(s.printMs)),
    ...(Object.keys(phases).length > 0 ? { phases } : {}),
  };
}

function targetVerdict(
  rows: Row[],
  sum: (r: Row | undefined, f: "runningMs" | "printMs") => Summary | undefined,
): { lines: string[]; json: Record<string, unknown> } {
  const by = (cls: abstract new (...a: never[]) => Contender) => rows.find((r) => r.contender instanceof cls);
  const berth = by(BerthRuntime);
  const lines: string[] = [];
  const json: Record<string, unknown> = {};
  for (const f of ["runningMs", "printMs"] as const) {
    const b = sum(berth, f)?.p50;
    const runc = sum(
      rows.find((r) => r.contender instanceof RawRunc && r.contender.config === "runc-spec"),
      f,
    )?.p50;
    const podman = sum(by(Podman), f)?.p50;
    const ctr = sum(by(Ctr), f)?.p50;
    const checks: Record<string, boolean | "n/a"> = {
      [`<= ${TARGET_RATIO_TO_RUNC}x raw runc`]:
        b === undefined || runc === undefined ? "n/a" : b <= TARGET_RATIO_TO_RUNC * runc,
      "below podman": b === undefined || podman === undefined ? "n/a" : b < podman,
      "below ctr": b === undefined || ctr === undefined ? "n/a" : b < ctr,
    };
    const values = Object.values(checks);
    const met = values.includes("n/a") ? "n/a" : values.every((v) => v === true);
    json[f] = { met, checks };
    const parts = Object.entries(checks).map(([k, v]) => `${k}: ${v === "n/a" ? "n/a" : v ? "yes" : "NO"}`);
    const verdict = met === "n/a" ? "CANNOT TELL" : met ? "MET" : "NOT MET";
    lines.push(`${f === "runningMs" ? "(a)" : "(b)"} ${verdict} (${parts.join(", ")})`);
  }
  return { lines, json };
}

main().catch((e) => {
  console.error(`container-start benchmark failed: ${describeError(e)}`);
  process.exitCode = 1;
});
