// CLI start-up: the wall time of `berth --help` and `berth
// deployment list` (against a running coordinator), spawn → exit, from the
// bundle (`npm run build`, what the npm package runs) and from the sources
// through tsx (cli/bin.js, what a checkout ran before the bundle), against
// `node -e 0` (the floor: Node's own start) and `nomad --help` where nomad is
// installed. Contenders run round-robin within each iteration, the first one
// rotating, so machine noise spreads evenly; warm-up iterations are dropped.
// Target: `berth --help` (bundle) p50 <= 200 ms.
// Usage: node --import tsx bench/cli/run.ts [--iterations 20] [--warmup 2] [--no-sources]

import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { DEFAULT_OUTDIR, ENTRY_NAME, buildCli } from "../../scripts/build.ts";
import { startTestCluster } from "../../test/helpers/cluster.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { machineInfo, toolVersion } from "../lib/machine.ts";
import { exec } from "../lib/proc.ts";
import { fmtMs, fmtRatio, formatTable, summarize, writeResults } from "../lib/stats.ts";

const BUNDLE = `${DEFAULT_OUTDIR}/${ENTRY_NAME}`;
const SOURCES = fileURLToPath(new URL("../../cli/bin.js", import.meta.url));
const TARGET_HELP_P50_MS = 200;

interface Contender {
  name: string;
  cmd: string;
  args: string[];
  /** What its stdout must hold: a run that answers something else is an error, not a sample. */
  expect: RegExp;
}

function hasCommand(cmd: string): boolean {
  try {
    execFileSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      iterations: { type: "string", default: "20" },
      warmup: { type: "string", default: "2" },
      "no-sources": { type: "boolean", default: false },
    },
  });
  const iterations = Number(values.iterations);
  const warmup = Number(values.warmup);
  if (!Number.isInteger(iterations) || iterations < 1)
    throw new Error("--iterations must be a positive integer");
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error("--warmup must be 0 or more");

  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    console.log("building the bundle (npm run build)...");
    await buildCli();

    // A real coordinator (in this process) and nats-server; the CLI reaches it over HTTP with the admin token.
    const cluster = await startTestCluster({
      after: (fn) =>
        cleanup.add("stop the coordinator", async () => {
          await fn();
        }),
    });
    const home = benchTempDir(cleanup, "berth-bench-cli-");
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: home,
      BERTH_URL: cluster.url,
      SERVICE_TOKEN: cluster.adminToken,
      BERTH_PROFILE: "",
      BERTH_CONFIG: "",
      NO_COLOR: "1",
    };

    const contenders: Contender[] = [
      { name: "node -e 0", cmd: process.execPath, args: ["-e", "0"], expect: /^$/ },
      {
        name: "berth --help (bundle)",
        cmd: process.execPath,
        args: [BUNDLE, "--help"],
        expect: /Usage: berth/,
      },
      {
        name: "berth deployment list (bundle)",
        cmd: process.execPath,
        args: [BUNDLE, "deployment", "list"],
        expect: /NAME|ID/i,
      },
    ];
    if (!values["no-sources"]) {
      contenders.push(
        {
          name: "berth --help (tsx)",
          cmd: process.execPath,
          args: [SOURCES, "--help"],
          expect: /Usage: berth/,
        },
        {
          name: "berth deployment list (tsx)",
          cmd: process.execPath,
          args: [SOURCES, "deployment", "list"],
          expect: /NAME|ID/i,
        },
      );
    }
    const unavailable: Record<string, string> = {};
    if (hasCommand("nomad")) {
      contenders.push({ name: "nomad --help", cmd: "nomad", args: ["--help"], expect: /Usage: nomad/ });
    } else unavailable["nomad --help"] = "nomad not installed";

    const samples: Record<string, number[]> = Object.fromEntries(contenders.map((c) => [c.name, []]));
    const errors: Record<string, string[]> = Object.fromEntries(contenders.map((c) => [c.name, []]));
    for (let i = 0; i < warmup + iterations && !cleanup.interrupted; i++) {
      const order = contenders.map((_, k) => contenders[(k + i) % contenders.length]!);
      for (const c of order) {
        const r = await exec(c.cmd, c.args, { env, timeoutMs: 60_000 });
        // nomad prints its help to stderr and exits 1; berth and node exit 0.
        const text = r.stdout || r.stderr;
        const ok = (r.code === 0 || c.cmd === "nomad") && c.expect.test(text);
        if (!ok) {
          errors[c.name]!.push(`exit ${r.code}: ${(r.stderr || r.stdout).trim().slice(0, 300)}`);
          continue;
        }
        if (i >= warmup) samples[c.name]!.push(r.ms);
      }
    }

    const summaries = Object.fromEntries(contenders.map((c) => [c.name, summarize(samples[c.name]!)]));
    const floor = summaries["node -e 0"]?.p50;
    console.log(
      formatTable(
        ["command", "n", "p50 ms", "p95 ms", "min ms", "max ms", "p50 / node -e 0", "errors"],
        contenders.map((c) => {
          const s = summaries[c.name]!;
          return [
            c.name,
            String(s.n),
            fmtMs(s.p50),
            fmtMs(s.p95),
            fmtMs(s.min),
            fmtMs(s.max),
            fmtRatio(s.p50, floor),
            String(errors[c.name]!.length),
          ];
        }),
      ),
    );
    for (const [name, why] of Object.entries(unavailable)) console.log(`${name}: unavailable: ${why}`);
    for (const [name, list] of Object.entries(errors))
      if (list.length) console.log(`${name} errors: ${list[0]}`);
    const helpP50 = summaries["berth --help (bundle)"]?.p50 ?? Number.NaN;
    const met = helpP50 <= TARGET_HELP_P50_MS;
    console.log(
      `target: berth --help (bundle) p50 <= ${TARGET_HELP_P50_MS} ms: ${met ? "met" : "NOT met"} (${fmtMs(helpP50)} ms; load average ${machine.loadAvg1} on ${machine.cores} cores at the start)`,
    );
    const path = writeResults("cli", {
      machine,
      versions: { node: process.version, nomad: await toolVersion("nomad", ["version"]) },
      iterations,
      warmup,
      contenders: contenders.map((c) => ({ name: c.name, command: [c.cmd, ...c.args] })),
      unavailable,
      summaries,
      samples,
      errors,
      target: { helpP50Ms: TARGET_HELP_P50_MS, helpP50: helpP50, met },
    });
    console.log(`results: ${path}`);
  } finally {
    await cleanup.run();
  }
}

await main();
