// Resident memory of an idle agent: `berth agent` in edge mode (no
// coordinator), containers enabled, none running, against a bare
// `node -e` process that only keeps its event loop alive (Node's own floor),
// started and measured alternately in the same run.
//
// Rows:
// - node -e (reference): the floor every Node process pays.
// - berth agent (bundle): what an installed agent runs (dist/cli, `npm run build`).
// - node --import tsx -e: the floor of a process that loads sources through tsx.
// - berth agent (tsx): a checkout's `bin/berth.js agent`, sources compiled on load.
// - with --before DIR: the bundle of another tree (e.g. `git archive` of an
//   older commit, its node_modules linked), for before/after in one run.
//
// Each process is measured after it is ready (the agent: its socket answers)
// and a settle time; VmRSS is then sampled once a second. An idle agent's
// RSS is a sawtooth (garbage from its timers, then a GC): sample for long
// enough to see both (30 s or more).
// Usage: node --import tsx bench/agent-memory/run.ts [--rounds 3] [--settle-s 10] [--samples 30] [--before DIR]

import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { cleanupNetworkByPrefix } from "../../agent/network/index.ts";
import { buildCli, ROOT } from "../../scripts/build.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir, removeTree } from "../lib/fs.ts";
import { machineInfo } from "../lib/machine.ts";
import { formatTable, summarize, writeResults } from "../lib/stats.ts";

const MiB = 1024 * 1024;
const TARGET_MB = 80;

interface Contender {
  name: string;
  /** argv; `{data}` is replaced by a fresh data dir per start. */
  argv: (dataDir: string) => string[];
  cwd: string;
  /** Ready once this file exists (the agent's socket); absent: at once. */
  readyFile?: (dataDir: string) => string;
  samplesMb: number[];
}

function options() {
  const { values } = parseArgs({
    options: {
      rounds: { type: "string", default: "3" },
      "settle-s": { type: "string", default: "10" },
      samples: { type: "string", default: "30" },
      before: { type: "string" },
    },
  });
  const o = {
    rounds: Number(values.rounds),
    settleMs: Number(values["settle-s"]) * 1000,
    samples: Number(values.samples),
    before: values.before ? resolve(values.before) : undefined,
  };
  if (!(o.rounds >= 1 && o.samples >= 1 && o.settleMs >= 0))
    throw new Error("rounds, samples >= 1; settle-s >= 0");
  return o;
}

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) * 1024;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(check: () => boolean, timeoutMs: number, what: string, child: ChildProcess) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (child.exitCode !== null) throw new Error(`${what}: the process exited with ${child.exitCode}`);
    if (Date.now() > deadline) throw new Error(`${what}: not ready within ${timeoutMs} ms`);
    await sleep(100);
  }
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((res) => {
    const kill = setTimeout(() => child.kill("SIGKILL"), 15_000);
    child.once("exit", () => {
      clearTimeout(kill);
      res();
    });
    child.kill("SIGTERM");
  });
}

async function measure(c: Contender, o: ReturnType<typeof options>, cleanup: Cleanup): Promise<number[]> {
  const data = benchTempDir(cleanup, "berth-bench-agent-mem-");
  const child = spawn(process.execPath, c.argv(data), {
    cwd: c.cwd,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  try {
    const ready = c.readyFile?.(data);
    if (ready) await waitFor(() => existsSync(ready), 120_000, c.name, child);
    await sleep(o.settleMs);
    const out: number[] = [];
    for (let i = 0; i < o.samples; i++) {
      if (child.exitCode !== null) throw new Error(`${c.name} exited: ${stderr}`);
      out.push(rssBytes(child.pid as number) / MiB);
      await sleep(1000);
    }
    return out;
  } finally {
    await stop(child);
    await removeTree(data);
  }
}

const NET = { namePrefix: "bam", bridge: "bambr0", table: "berth_bam" };

function agentArgv(entry: string) {
  return (data: string) => [
    entry,
    "agent",
    "--data-dir",
    join(data, "agent"),
    "--grpc-port",
    "0",
    "--network-prefix",
    NET.namePrefix,
    "--subnet4",
    "10.252.0.0/16",
    "--subnet6",
    "fd00:62:616d::/64",
    "--image-gc-hours",
    "0",
  ];
}

async function main(): Promise<void> {
  const o = options();
  if (process.getuid?.() !== 0) throw new Error("the agent runs containers: run this benchmark as root");
  const cleanup = new Cleanup();
  const unhook = cleanup.onSignals();
  try {
    // Two levels below the package root, as dist/cli is: the bundle finds sdk/ and proto/ from there.
    const outdir = join(ROOT, "dist", "bench-agent-memory");
    cleanup.add("remove the bench bundle", () => removeTree(outdir));
    console.log("building the agent bundle...");
    await buildCli(outdir);
    const contenders: Contender[] = [
      {
        name: "node -e (reference)",
        argv: () => ["-e", "setInterval(() => {}, 1 << 30)"],
        cwd: ROOT,
        samplesMb: [],
      },
      {
        name: "berth agent (bundle)",
        argv: agentArgv(join(outdir, "berth.js")),
        cwd: ROOT,
        readyFile: (d) => join(d, "agent", "agent.sock"),
        samplesMb: [],
      },
      {
        name: "node --import tsx -e (tsx's floor)",
        argv: () => ["--import", "tsx", "-e", "setInterval(() => {}, 1 << 30)"],
        cwd: ROOT,
        samplesMb: [],
      },
      {
        name: "berth agent (tsx)",
        argv: agentArgv(join(ROOT, "bin", "berth.js")),
        cwd: ROOT,
        readyFile: (d) => join(d, "agent", "agent.sock"),
        samplesMb: [],
      },
    ];
    if (o.before) {
      const beforeOut = join(o.before, "dist", "bench-agent-memory");
      console.log(`building the agent bundle of ${o.before}...`);
      const { buildCli: buildBefore } = (await import(join(o.before, "scripts", "build.ts"))) as {
        buildCli: (outdir: string) => Promise<unknown>;
      };
      await buildBefore(beforeOut);
      cleanup.add("remove the before bundle", () => removeTree(beforeOut));
      contenders.splice(2, 0, {
        name: "berth agent (bundle, before)",
        argv: agentArgv(join(beforeOut, "berth.js")),
        cwd: o.before,
        readyFile: (d) => join(d, "agent", "agent.sock"),
        samplesMb: [],
      });
    }
    cleanup.add("remove the agent's bridge, table and namespaces", () => cleanupNetworkByPrefix(NET));
    const machine = machineInfo();
    for (let round = 1; round <= o.rounds && !cleanup.interrupted; round++) {
      for (const c of contenders) {
        if (cleanup.interrupted) break;
        process.stdout.write(`round ${round}/${o.rounds}: ${c.name}...\n`);
        c.samplesMb.push(...(await measure(c, o, cleanup)));
      }
    }
    const ref = summarize(contenders[0]?.samplesMb ?? []);
    const rows = contenders.map((c) => {
      const s = summarize(c.samplesMb);
      return [
        c.name,
        s.min.toFixed(1),
        s.p50.toFixed(1),
        s.max.toFixed(1),
        (s.p50 - ref.p50).toFixed(1),
        `${(s.p50 / ref.p50).toFixed(2)}x`,
        String(s.n),
      ];
    });
    console.log(`\nidle resident memory (VmRSS), MiB; load average ${machine.loadAvg1} at the start\n`);
    console.log(
      formatTable(["process", "min", "p50", "max", "p50 over node -e", "p50 vs node -e", "n"], rows),
    );
    const bundle = summarize(contenders[1]?.samplesMb ?? []);
    console.log(
      `\ntarget (idle agent, bundle, p50 <= ${TARGET_MB} MB): ${bundle.p50 * (MiB / 1e6) <= TARGET_MB ? "MET" : "NOT MET"} (${(bundle.p50 * (MiB / 1e6)).toFixed(1)} MB)`,
    );
    const path = writeResults("agent-memory", {
      benchmark: "agent-memory",
      date: new Date().toISOString(),
      machine,
      node: process.version,
      options: o,
      unit: "MiB (VmRSS)",
      contenders: contenders.map((c) => ({
        name: c.name,
        summary: summarize(c.samplesMb),
        samples: c.samplesMb,
      })),
    });
    console.log(`wrote ${path}`);
  } finally {
    unhook();
    await cleanup.run();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
